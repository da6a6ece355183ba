// Generated, linearly separable test data: three Gaussian-ish blobs in 4 dimensions.
using System;

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
    }
}
