// Generated, linearly separable test data: three Gaussian-ish blobs in 4 dimensions; the usual model,
// one-hot targets and bit-pattern readers shared by the tests.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Mptrain.Tests
{
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
