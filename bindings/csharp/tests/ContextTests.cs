// The context through the C# API: its description, one compact JSON object, read member by member
// (Mono's profile here has no JSON parser) against what the context was created with and what its other
// getters report.
using System;
using System.Collections.Generic;
using System.Text.RegularExpressions;

namespace Mptrain.Tests
{
    public static class ContextTests
    {
        // The top-level members of a compact JSON object whose values are strings, numbers or literals (the
        // CPU backend's description), as name -> value text (strings keep their quotes). Fails on text
        // that is anything else or names a member twice.
        static Dictionary<string, string> Members(string json)
        {
            const string member = @"""(?<name>[^""\\]*)"":(?<value>""(?:[^""\\]|\\.)*""|[-0-9.eE+a-z]+)";
            Match whole = Regex.Match(json, @"^\{(?:" + member + @"(?:,(?!\})|(?=\})))*\}$");
            Assert.True(whole.Success, "a flat, compact JSON object: " + json);
            var members = new Dictionary<string, string>();
            CaptureCollection names = whole.Groups["name"].Captures, values = whole.Groups["value"].Captures;
            for (int i = 0; i < names.Count; i++)
            {
                Assert.True(!members.ContainsKey(names[i].Value), "\"" + names[i].Value + "\" once: " + json);
                members[names[i].Value] = values[i].Value;
            }
            return members;
        }

        static string Member(Dictionary<string, string> members, string name)
        {
            string value;
            Assert.True(members.TryGetValue(name, out value), "\"" + name + "\" in the description");
            return value;
        }

        [Test]
        public static void DescribeNamesTheCpuBackendItsDeviceAndThreadsInOneJsonObject()
        {
            using (var ctx = new Context(new ContextOptions { Backend = Backend.Cpu, Threads = 1, MemoryBudget = 1UL << 30 }))
            {
                string text = ctx.Describe();
                Dictionary<string, string> description = Members(text);
                Assert.Equal("\"" + Library.Version + "\"", Member(description, "version"), "version");
                Assert.Equal("\"cpu\"", Member(description, "backend"), "backend");
                Assert.True(Member(description, "device").Length > 2, "a device name: " + text);
                // The CPU was asked for, not fallen back to.
                Assert.Equal("\"\"", Member(description, "auto_fallback"), "auto_fallback");
                Assert.Equal((1UL << 30).ToString(), Member(description, "memory_budget_bytes"), "memory budget");
                Assert.Equal("1", Member(description, "threads"), "threads");
                Assert.True(Member(description, "gemm_library").Length > 2, "a GEMM library: " + text);
                string amx = Member(description, "amx");
                Assert.True(amx == "\"supported\"" || amx == "\"refused by Linux\"" || amx == "\"absent\"", "amx " + amx);
                string smallGemm = Member(description, "small_gemm");
                Assert.True(Array.IndexOf(new[] { "\"avx512\"", "\"avx512f\"", "\"avx2\"", "\"none\"" }, smallGemm) >= 0,
                            "small_gemm " + smallGemm);
                Assert.True(!description.ContainsKey("device_index"), "no CUDA member: " + text);
                Assert.Equal(text, ctx.Describe(), "the description of an unused context, again");
            }
        }

        [Test]
        public static void DescribeReportsTheMemoryCountersThatMemoryReadsAfterTraining()
        {
            float[] x; int[] y;
            Data.Blobs(60, 3, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, Data.Adam))
            {
                trainer.Fit(data, 1, 20);
                Dictionary<string, string> description = Members(ctx.Describe());
                MemoryUsage memory = ctx.Memory;
                Assert.True(memory.Peak > 0, "memory held in training");
                Assert.Equal(memory.Used.ToString(), Member(description, "memory_used_bytes"), "memory used");
                Assert.Equal(memory.Peak.ToString(), Member(description, "memory_peak_bytes"), "memory peak");
                Assert.Equal("\"cpu\"", Member(description, "backend"), "backend");
            }
        }
    }
}
