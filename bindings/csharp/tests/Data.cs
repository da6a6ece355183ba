// Generated, linearly separable test data: three Gaussian-ish blobs in 4 dimensions; the usual model and
// options, one-hot targets, bit-pattern readers, temporary directories and damaged files shared by the tests.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;

namespace Mptrain.Tests
{
    /// <summary>A fresh temporary directory, deleted on Dispose.</summary>
    public sealed class TempDir : IDisposable
    {
        public readonly string Path = System.IO.Path.Combine(System.IO.Path.GetTempPath(), "mptrain-cs-" + Guid.NewGuid().ToString("N"));
        public TempDir() { Directory.CreateDirectory(Path); }
        public string File(string name) { return System.IO.Path.Combine(Path, name); }
        public void Dispose() { if (Directory.Exists(Path)) Directory.Delete(Path, true); }
    }

    public static class Data
    {
        public const int Features = 4;
        public const int Classes = 3;

        public static void Blobs(int rows, int seed, out float[] samples, out int[] labels)
        {
            var random = new Random(seed);
            samples = new float[rows * Features];
            labels = new int[rows];
            for (int row = 0; row < rows; row++)
            {
                int label = row % Classes;
                labels[row] = label;
                for (int f = 0; f < Features; f++)
                    samples[row * Features + f] = (f % Classes == label ? 2.5f : 0.0f) + (float)(random.NextDouble() - 0.5) * 1.2f;
            }
        }

        public static Context CpuContext(ulong seed = 7)
        {
            return new Context(new ContextOptions { Backend = Backend.Cpu, Threads = 1, Seed = seed });
        }

        public static Model Mlp(Context context)
        {
            return new Model(context, Features).AddDense(16, Activation.Relu).AddDense(Classes, Activation.Softmax);
        }

        // Adam at 0.01, every other option the library's default.
        public static readonly TrainerOptions Adam = new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f };

        // Each label as a row of Classes float targets, 1 at the label.
        public static float[] OneHot(int[] labels)
        {
            var targets = new float[labels.Length * Classes];
            for (int row = 0; row < labels.Length; row++) targets[row * Classes + labels[row]] = 1.0f;
            return targets;
        }

        public static int Bits(float value) { return BitConverter.SingleToInt32Bits(value); }

        public static int[] Bits(float[] values) { return values.Select(BitConverter.SingleToInt32Bits).ToArray(); }

        // An evaluation's loss and accuracy as bit patterns.
        public static int[] Bits(Evaluation evaluation) { return new[] { Bits(evaluation.Loss), Bits(evaluation.Accuracy) }; }

        // The first two thirds of the file `source` written to `target`: a damaged file.
        public static void Truncate(string source, string target)
        {
            byte[] content = File.ReadAllBytes(source);
            File.WriteAllBytes(target, content.Take(content.Length * 2 / 3).ToArray());
        }

        // Every layer's fp32 weights and biases as bit patterns: equal only when bit-identical.
        public static int[] WeightBits(Model model)
        {
            var bits = new List<int>();
            for (int layer = 0; layer < model.LayerCount; layer++)
            {
                float[] w, b;
                model.GetWeights(layer, out w, out b);
                bits.AddRange(Bits(w.Concat(b).ToArray()));
            }
            return bits.ToArray();
        }
    }
}
