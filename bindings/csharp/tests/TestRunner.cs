// A self-contained test runner (no NUnit needed): runs every static method marked [Test] in this
// assembly, prints one line per test and the closing line "N passed, N failed"; exit code 1 on failure.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;

namespace Mptrain.Tests
{
    [AttributeUsage(AttributeTargets.Method)]
    public sealed class TestAttribute : Attribute { }

    public sealed class SkipException : Exception
    {
        public SkipException(string reason) : base(reason) { }
    }

    public static class Assert
    {
        public static void True(bool condition, string message = "expected true")
        {
            if (!condition) throw new Exception("assertion failed: " + message);
        }

        public static void Equal<T>(T expected, T actual, string what = "value")
        {
            if (!EqualityComparer<T>.Default.Equals(expected, actual))
                throw new Exception("assertion failed: " + what + ": expected " + expected + ", got " + actual);
        }

        public static void SequenceEqual<T>(IEnumerable<T> expected, IEnumerable<T> actual, string what = "sequence")
        {
            if (!expected.SequenceEqual(actual))
                throw new Exception("assertion failed: " + what + ": expected [" + string.Join(", ", expected) + "], got [" +
                                    string.Join(", ", actual) + "]");
        }

        public static TException Throws<TException>(Action action) where TException : Exception
        {
            try
            {
                action();
            }
            catch (TException expected)
            {
                return expected;
            }
            catch (Exception other)
            {
                throw new Exception("expected " + typeof(TException).Name + ", got " + other.GetType().Name + ": " + other.Message);
            }
            throw new Exception("expected " + typeof(TException).Name + ", nothing was thrown");
        }

        /// <summary>Expects actual within <paramref name="relative"/> (by default 1e-5) of expected, relatively (a loss
        /// against one recomputed in double).</summary>
        public static void Close(double expected, double actual, string what, double relative = 1e-5)
        {
            True(Math.Abs(actual - expected) <= relative * Math.Abs(expected), what + ": expected " + expected + ", got " + actual);
        }

        /// <summary>Expects an MptException with this status and a non-empty library message.</summary>
        public static MptException Fails(Status status, Action action)
        {
            MptException error = Throws<MptException>(action);
            Equal(status, error.Status, "status of '" + error.Message + "'");
            True(!string.IsNullOrEmpty(error.NativeMessage), "the exception carries a message");
            return error;
        }
    }

    public static class TestRunner
    {
        public static int Main(string[] args)
        {
            Console.WriteLine("mptrain " + Library.Version + " (C# bindings on " + Environment.Version + ")");
            var tests = typeof(TestRunner).Assembly.GetTypes()
                .SelectMany(type => type.GetMethods(BindingFlags.Public | BindingFlags.Static))
                .Where(method => method.GetCustomAttributes(typeof(TestAttribute), false).Length > 0)
                .Where(method => args.Length == 0 || args.Any(filter => method.Name.Contains(filter)))
                .OrderBy(method => method.DeclaringType.Name + "." + method.Name)
                .ToList();
            int passed = 0, failed = 0, skipped = 0;
            foreach (MethodInfo test in tests)
            {
                string name = test.DeclaringType.Name + "." + test.Name;
                try
                {
                    test.Invoke(null, null);
                    passed++;
                    Console.WriteLine("ok   " + name);
                }
                catch (TargetInvocationException wrapped) when (wrapped.InnerException is SkipException)
                {
                    skipped++;
                    Console.WriteLine("skip " + name + ": " + wrapped.InnerException.Message);
                }
                catch (TargetInvocationException wrapped)
                {
                    failed++;
                    Console.WriteLine("FAIL " + name + ": " + wrapped.InnerException);
                }
            }
            // Finalizers release whatever the tests left to the GC; they must not crash either.
            GC.Collect();
            GC.WaitForPendingFinalizers();
            Console.WriteLine(skipped > 0 ? string.Format("{0} passed, {1} failed, {2} skipped", passed, failed, skipped)
                                          : string.Format("{0} passed, {1} failed", passed, failed));
            return failed == 0 && passed > 0 ? 0 : 1;
        }
    }
}
