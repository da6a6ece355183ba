// ABI of the P/Invoke layer against the C side. The C API has no public structs (handles are opaque
// and options travel through setters), so there are no struct sizes or offsets to assert: instead
// this checks what the marshalling depends on: every enum value against mptrain.h (the spec), the
// sizes of the C types in the signatures against the C compiler (bindings/abi_probe.c), and that
// every function of the header has exactly one DllImport.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Text.RegularExpressions;

namespace Mptrain.Tests
{
    public static class AbiTests
    {
        static string Header()
        {
            string path = Environment.GetEnvironmentVariable("MPTRAIN_HEADER");
            if (string.IsNullOrEmpty(path)) throw new SkipException("MPTRAIN_HEADER is not set (ctest sets it)");
            return File.ReadAllText(path);
        }

        static readonly Dictionary<Type, string> Prefixes = new Dictionary<Type, string>
        {
            { typeof(Status), "MPT_STATUS_" }, { typeof(Backend), "MPT_BACKEND_" }, { typeof(DType), "MPT_DTYPE_" },
            { typeof(Precision), "MPT_PRECISION_" }, { typeof(Activation), "MPT_ACTIVATION_" },
            { typeof(Initializer), "MPT_INITIALIZER_" }, { typeof(Loss), "MPT_LOSS_" },
            { typeof(Optimizer), "MPT_OPTIMIZER_" }, { typeof(LrSchedule), "MPT_LR_SCHEDULE_" },
            { typeof(LossScaling), "MPT_LOSS_SCALING_" }, { typeof(LogLevel), "MPT_LOG_LEVEL_" },
        };

        // "MixedFp16" -> "MIXED_FP16", "AdamW" -> "ADAMW", "RmsProp" -> "RMSPROP", "IoError" -> "IO_ERROR"
        static string CName(string name)
        {
            if (name == "AdamW") return "ADAMW";
            if (name == "RmsProp") return "RMSPROP";
            return Regex.Replace(name, "(?<=[a-z0-9])([A-Z])", "_$1").ToUpperInvariant();
        }

        [Test]
        public static void EveryEnumValueMatchesTheHeader()
        {
            var header = Regex.Matches(Header(), @"\b(MPT_[A-Z0-9_]+)\s*=\s*(-?\d+)").Cast<Match>()
                .ToDictionary(m => m.Groups[1].Value, m => int.Parse(m.Groups[2].Value));
            var seen = new HashSet<string>();
            foreach (var pair in Prefixes)
            {
                foreach (object value in Enum.GetValues(pair.Key))
                {
                    string name = pair.Value + CName(value.ToString());
                    Assert.True(header.ContainsKey(name), name + " is in the header");
                    Assert.Equal(header[name], Convert.ToInt32(value), name);
                    seen.Add(name);
                }
            }
            string[] missing = header.Keys.Where(name => !seen.Contains(name)).ToArray();
            Assert.True(missing.Length == 0, "enum values missing in C#: " + string.Join(", ", missing));
        }

        [Test]
        public static void EveryHeaderFunctionHasOneDllImport()
        {
            var declared = new HashSet<string>(Regex.Matches(Header(), @"MPT_API[^;]*?\b(mpt_[a-z0-9_]+)\s*\(", RegexOptions.Singleline)
                .Cast<Match>().Select(m => m.Groups[1].Value));
            Type native = typeof(Context).Assembly.GetType("Mptrain.Native");
            string[] imported = native.GetMethods(BindingFlags.Static | BindingFlags.NonPublic | BindingFlags.Public)
                .Where(m => (m.Attributes & MethodAttributes.PinvokeImpl) != 0).Select(m => m.Name).ToArray();
            Assert.True(declared.Count > 50, "the header declares functions");
            Assert.Equal(imported.Length, imported.Distinct().Count(), "one import per function");
            Assert.SequenceEqual(declared.OrderBy(n => n, StringComparer.Ordinal), imported.OrderBy(n => n, StringComparer.Ordinal),
                                 "DllImports vs header functions");
        }

        [Test]
        public static void CTypeSizesMatchTheMarshalledTypes()
        {
            string probe = Environment.GetEnvironmentVariable("MPTRAIN_ABI_PROBE");
            if (string.IsNullOrEmpty(probe)) throw new SkipException("MPTRAIN_ABI_PROBE is not set (ctest sets it)");
            var start = new ProcessStartInfo(probe) { RedirectStandardOutput = true, UseShellExecute = false };
            Dictionary<string, int> sizes;
            using (Process process = Process.Start(start))
            {
                sizes = process.StandardOutput.ReadToEnd().Split('\n').Where(l => l.Length > 0)
                    .ToDictionary(l => l.Substring(0, l.LastIndexOf(' ')), l => int.Parse(l.Substring(l.LastIndexOf(' ') + 1)));
                process.WaitForExit();
            }
            var expected = new Dictionary<string, int>
            {
                { "int", Marshal.SizeOf(typeof(int)) }, { "int32_t", Marshal.SizeOf(typeof(int)) },
                { "int64_t", Marshal.SizeOf(typeof(long)) }, { "uint64_t", Marshal.SizeOf(typeof(ulong)) },
                { "uint8_t", Marshal.SizeOf(typeof(byte)) }, { "size_t", Marshal.SizeOf(typeof(UIntPtr)) },
                { "float", Marshal.SizeOf(typeof(float)) }, { "void*", Marshal.SizeOf(typeof(IntPtr)) },
                // delegates marshal as C function pointers
                { "mpt_log_fn", IntPtr.Size }, { "mpt_progress_fn", IntPtr.Size }, { "mpt_epoch_end_fn", IntPtr.Size },
            };
            foreach (Type type in Prefixes.Keys)
            {
                string cName = "mpt_" + Regex.Replace(type.Name, "(?<=[a-z])([A-Z])", "_$1").ToLowerInvariant();
                expected[cName == "mpt_d_type" ? "mpt_dtype" : cName] = Marshal.SizeOf(Enum.GetUnderlyingType(type));
            }
            foreach (var pair in expected)
            {
                Assert.True(sizes.ContainsKey(pair.Key), "the probe reports " + pair.Key);
                Assert.Equal(sizes[pair.Key], pair.Value, "sizeof(" + pair.Key + ")");
            }
            Assert.Equal(expected.Count, sizes.Count, "types reported by the probe");
        }

        [Test]
        public static void VersionAndStatusNamesComeFromTheLibrary()
        {
            Assert.Equal(3, Library.Version.Split('.').Length, "MAJOR.MINOR.PATCH");
            Assert.Equal("MPT_STATUS_SHAPE_MISMATCH", MptException.StatusName(Status.ShapeMismatch), "status name");
            Assert.Equal("MPT_STATUS_UNKNOWN", MptException.StatusName((Status)999), "unknown status");
            Assert.True(Library.CudaDeviceCount >= 0, "device count");
        }
    }
}
