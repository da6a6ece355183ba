// TrainerOptions.GlobalClipnorm and Trainer.GradientNorm: clipping bounds a step's gradient norm, the norm
// read is the last step's before clipping (after Step or in Fit's progress callback); bad bounds are refused.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Mptrain.Tests
{
    public static class GradientClippingTests
    {
        // fp32 SGD at rate 0.05 from seed 5 over `steps` batches of 10 rows: the weights' bits after them,
        // the L2 norm of the change of all weights and biases over the rate (for one plain SGD step, the
        // norm of the gradient it applied), and the trainer's GradientNorm before the first step and after
        // each (byFit: the steps are one unshuffled Fit's over all rows, the norms read from its progress
        // callback).
        static Tuple<int[], double, List<float>> ClipnormSgd(float[] x, int[] y, int steps, float momentum, float? clipnorm, bool byFit = false)
        {
            using (Context ctx = Data.CpuContext(5))
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Sgd,
                                                                         LearningRate = 0.05f, Momentum = momentum, GlobalClipnorm = clipnorm }))
            {
                int[] start = Data.WeightBits(model);
                var norms = new List<float> { trainer.GradientNorm };
                if (byFit)
                {
                    Assert.Equal(y.Length / 10, steps, "steps of one epoch");
                    trainer.SetCallbacks(progress => norms.Add(trainer.GradientNorm));
                    trainer.Fit(data, 1, 10, false);
                }
                else
                {
                    for (int step = 0; step < steps; step++)
                    {
                        trainer.Step(data, 10 * step, 10);
                        norms.Add(trainer.GradientNorm);
                    }
                }
                int[] trained = Data.WeightBits(model);
                double sum = 0;
                for (int i = 0; i < trained.Length; i++)
                {
                    double change = (double)BitConverter.Int32BitsToSingle(trained[i]) - BitConverter.Int32BitsToSingle(start[i]);
                    sum += change * change;
                }
                return Tuple.Create(trained, Math.Sqrt(sum) / 0.05f, norms);
            }
        }

        [Test]
        public static void GlobalClipnormBoundsAStepsGradientNormAndOneAboveItChangesNothingBitForBit()
        {
            float[] x; int[] y;
            Data.Blobs(30, 71, out x, out y);
            Func<int, float, float?, Tuple<int[], double, List<float>>> train = (steps, momentum, clipnorm) => ClipnormSgd(x, y, steps, momentum, clipnorm);
            // A bound far above the gradients' norm: momentum SGD steps as without clipping, bit for bit.
            int[] plain = train(3, 0.9f, null).Item1;
            Assert.True(!plain.SequenceEqual(train(0, 0.9f, null).Item1), "the steps move the weights");
            Assert.True(train(3, 0.9f, 1e30f).Item1.SequenceEqual(plain), "a bound of 1e30 steps as no clipping, bit for bit");
            // A bound far below it: the first plain SGD step's gradient is scaled down to the bound's length.
            Tuple<int[], double, List<float>> unclipped = train(1, 0.0f, null), clipped = train(1, 0.0f, 1e-3f);
            Assert.True(unclipped.Item2 > 100 * 1e-3, "so that the bound clips: " + unclipped.Item2);
            Assert.Close(1e-3, clipped.Item2, "the clipped step's gradient norm against the bound", 1e-3);
            Assert.True(!clipped.Item1.SequenceEqual(unclipped.Item1), "clipping moves the step");
        }

        [Test]
        public static void GradientNormIsTheLastStepsBeforeClippingAndNaNWhereNoneWasTaken()
        {
            float[] x; int[] y;
            Data.Blobs(30, 71, out x, out y);
            // The norm of the gradient one unclipped plain SGD step applied, from its weight change.
            Tuple<int[], double, List<float>> unclipped = ClipnormSgd(x, y, 1, 0.0f, null), clipped = ClipnormSgd(x, y, 1, 0.0f, 1e-3f);
            Assert.True(float.IsNaN(clipped.Item3[0]), "before the first step: " + clipped.Item3[0]);
            Assert.Close(unclipped.Item2, clipped.Item3[1], "the clipped step's norm before clipping against the unclipped step's", 1e-4);
            Assert.True(clipped.Item3[1] > 1e-3f, "so that step was clipped: " + clipped.Item3[1]);
            Assert.True(float.IsNaN(unclipped.Item3[1]), "no clipping, none taken: " + unclipped.Item3[1]);
            // From a progress callback of a clipping Fit (one epoch of the same three batches, unshuffled):
            // each reported step's norm, finite and as step by step, with the same weights after it.
            Tuple<int[], double, List<float>> stepped = ClipnormSgd(x, y, 3, 0.0f, 1e-3f), fitted = ClipnormSgd(x, y, 3, 0.0f, 1e-3f, true);
            Assert.True(fitted.Item1.SequenceEqual(stepped.Item1), "Fit takes the steps taken one by one");
            Assert.Equal(4, fitted.Item3.Count, "norms read: " + string.Join(" ", fitted.Item3));
            Assert.True(fitted.Item3.Skip(1).All(norm => !float.IsNaN(norm) && !float.IsInfinity(norm) && norm > 1e-3f),
                        "finite and above the bound: " + string.Join(" ", fitted.Item3));
            Assert.SequenceEqual(stepped.Item3.Skip(1), fitted.Item3.Skip(1), "the progress callback's norms against step by step");
            Assert.Equal(3, fitted.Item3.Skip(1).Distinct().Count(), "three steps' own norms, not one read three times");
        }

        [Test]
        public static void GlobalClipnormNegativeNaNOrInfiniteIsRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                foreach (float refused in new[] { -1.0f, -1e-30f, float.NaN, float.PositiveInfinity })
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, new TrainerOptions { GlobalClipnorm = refused }).Dispose());
                    Assert.True(error.NativeMessage.Contains("global_clipnorm"), "the message names the option: " + error.NativeMessage);
                }
                new Trainer(model, new TrainerOptions { GlobalClipnorm = 0.0f }).Dispose(); // 0: none
            }
        }
    }
}
