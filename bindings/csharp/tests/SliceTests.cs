// Dataset.Slice: a validation split made of slices trains and evaluates bit for bit as data sets of
// copied rows; out-of-range bounds throw MptException with Status.InvalidArgument; a slice keeps
// working after its source (and its Context) are disposed. Dataset.Subset: the rows listed, in order,
// repeats included; out-of-range indices and no rows throw Status.InvalidArgument.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Mptrain.Tests
{
    public static class SliceTests
    {
        const int Rows = 120;
        const int TrainRows = 90; // Keras's validation_split 0.25: the last 30 rows held out

        // Integer labels, or one-hot float targets.
        static Dataset Make(Context ctx, float[] x, int[] y, bool oneHot)
        {
            return oneHot ? Dataset.FromTargets(ctx, x, Data.Features, Data.OneHot(y), Data.Classes)
                          : Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
        }

        // Rows [first, first + rows) of the blobs, copied into a data set of their own.
        static Dataset Copied(Context ctx, float[] x, int[] y, int first, int rows, bool oneHot)
        {
            return Make(ctx, x.Skip(first * Data.Features).Take(rows * Data.Features).ToArray(),
                        y.Skip(first).Take(rows).ToArray(), oneHot);
        }

        static TrainerOptions Options(Precision precision, bool oneHot)
        {
            return new TrainerOptions
            {
                Precision = precision,
                Loss = oneHot ? Loss.CategoricalCrossentropy : Loss.SparseCategoricalCrossentropy,
                Optimizer = Optimizer.Adam,
                LearningRate = 0.01f,
            };
        }

        // What a run on one split left, bit patterns throughout.
        sealed class Run
        {
            internal long[] Rows;
            internal int[] Initial, Weights, EachEpoch, Training, Validation, StepLosses;
        }

        // Fits 3 shuffled epochs on the training part, validating each epoch from the epoch-end callback,
        // then evaluates both parts and takes two steps. The split is made of slices of one data set
        // (disposed once sliced), or of two data sets of copied rows.
        static Run Train(Precision precision, bool oneHot, bool bySlices)
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 11, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Options(precision, oneHot)))
            {
                Assert.Equal(precision, trainer.Precision, "precision");
                Dataset training, validation;
                if (bySlices)
                {
                    using (Dataset whole = Make(ctx, x, y, oneHot))
                    {
                        training = whole.Slice(0, TrainRows);
                        validation = whole.Slice(TrainRows, Rows - TrainRows);
                    } // the slices keep the rows
                }
                else
                {
                    training = Copied(ctx, x, y, 0, TrainRows, oneHot);
                    validation = Copied(ctx, x, y, TrainRows, Rows - TrainRows, oneHot);
                }
                using (training)
                using (validation)
                {
                    var run = new Run { Initial = Data.WeightBits(model) };
                    var eachEpoch = new List<int>();
                    trainer.SetCallbacks(null, e => eachEpoch.AddRange(Data.Bits(trainer.Evaluate(validation))));
                    trainer.Fit(training, 3, 16);
                    trainer.SetCallbacks(null);
                    run.EachEpoch = eachEpoch.ToArray();
                    run.Training = Data.Bits(trainer.Evaluate(training, 16));
                    run.Validation = Data.Bits(trainer.Evaluate(validation, 16));
                    run.StepLosses = new[] { Data.Bits(trainer.Step(training, 5, 16)), Data.Bits(trainer.Step(training, 60, 16)) };
                    run.Weights = Data.WeightBits(model);
                    run.Rows = new[] { training.Rows, validation.Rows };
                    return run;
                }
            }
        }

        [Test]
        public static void AValidationSplitOfSlicesTrainsAndEvaluatesBitForBitAsCopiedRows()
        {
            foreach (Precision precision in new[] { Precision.Fp32, Precision.MixedBf16 })
            {
                foreach (bool oneHot in new[] { false, true })
                {
                    string what = precision + (oneHot ? " one-hot targets" : " labels") + ": ";
                    Run slices = Train(precision, oneHot, true), copies = Train(precision, oneHot, false);
                    Assert.SequenceEqual(new long[] { TrainRows, Rows - TrainRows }, slices.Rows, what + "rows of the slices");
                    Assert.Equal(3 * 2, slices.EachEpoch.Length, what + "validations from the epoch-end callback");
                    Assert.True(!slices.Weights.SequenceEqual(slices.Initial), what + "fit moved the weights");
                    Assert.SequenceEqual(copies.Initial, slices.Initial, what + "initial weight bits");
                    Assert.SequenceEqual(copies.EachEpoch, slices.EachEpoch, what + "validation bits each epoch");
                    Assert.SequenceEqual(copies.Training, slices.Training, what + "training evaluation bits");
                    Assert.SequenceEqual(copies.Validation, slices.Validation, what + "validation evaluation bits");
                    Assert.SequenceEqual(copies.StepLosses, slices.StepLosses, what + "step loss bits");
                    Assert.SequenceEqual(copies.Weights, slices.Weights, what + "weight bits");
                }
            }
        }

        [Test]
        public static void OutOfRangeBoundsAreInvalidArguments()
        {
            float[] x; int[] y;
            Data.Blobs(10, 3, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                var refused = new[]
                {
                    new[] { -1L, 1 }, new[] { 10L, 1 } /* past the last row */, new[] { 0L, 0 } /* no rows */, new[] { 3L, -1 },
                    new[] { 0L, 11 } /* a row too many */, new[] { 9L, 2 }, new[] { long.MinValue, 1 }, new[] { long.MaxValue, 1 },
                    new[] { 1L, long.MaxValue },
                };
                foreach (long[] bounds in refused)
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => data.Slice(bounds[0], bounds[1]));
                    Assert.True(error.NativeMessage.Contains("slice"), "the library's message: " + error.NativeMessage);
                    Assert.True(error.Message.StartsWith("MPT_STATUS_INVALID_ARGUMENT: "), error.Message);
                }
                // The edges are accepted.
                using (Dataset all = data.Slice(0, 10)) Assert.Equal(10L, all.Rows, "rows of slice (0, 10)");
                using (Dataset last = data.Slice(9, 1)) Assert.Equal(1L, last.Rows, "rows of slice (9, 1)");
                // A slice's bounds are its own rows, counted from its first.
                using (Dataset slice = data.Slice(2, 5))
                {
                    foreach (long[] bounds in new[] { new[] { 5L, 1 }, new[] { 0L, 6 }, new[] { 4L, 2 }, new[] { -2L, 1 } })
                        Assert.Fails(Status.InvalidArgument, () => slice.Slice(bounds[0], bounds[1]));
                    using (Dataset inner = slice.Slice(4, 1)) Assert.Equal(1L, inner.Rows, "rows of slice (4, 1) of a slice");
                    Assert.Equal(5L, slice.Rows, "rows of the slice");
                }
                Assert.Equal(10L, data.Rows, "rows of the source");
                data.Dispose();
                Assert.Throws<ObjectDisposedException>(() => data.Slice(0, 1));
            }
        }

        [Test]
        public static void ASliceKeepsWorkingAfterItsSourceAndContextAreDisposed()
        {
            float[] x; int[] y;
            Data.Blobs(60, 5, out x, out y);
            Context ctx = Data.CpuContext();
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Options(Precision.Fp32, false)))
            {
                Dataset whole = Make(ctx, x, y, false);
                using (Dataset slice = whole.Slice(20, 30))
                {
                    whole.Dispose();
                    Assert.True(whole.IsDisposed && !slice.IsDisposed, "only the source is disposed");
                    using (Dataset inner = slice.Slice(5, 10)) // rows 25..35 of the source
                    using (Dataset sliceCopy = Copied(ctx, x, y, 20, 30, false))
                    using (Dataset innerCopy = Copied(ctx, x, y, 25, 10, false))
                    {
                        ctx.Dispose();
                        Assert.Equal(30L, slice.Rows, "rows");
                        Assert.Equal((long)Data.Features, slice.Features, "features");
                        Assert.Equal(10L, inner.Rows, "rows of the slice of the slice");
                        for (int round = 0; round < 2; round++)
                        {
                            Assert.SequenceEqual(Data.Bits(trainer.Evaluate(sliceCopy, 8)), Data.Bits(trainer.Evaluate(slice, 8)),
                                                 "evaluation bits of the slice, round " + round);
                            Assert.SequenceEqual(Data.Bits(trainer.Evaluate(innerCopy, 4)), Data.Bits(trainer.Evaluate(inner, 4)),
                                                 "evaluation bits of the slice of the slice, round " + round);
                            int[] before = Data.WeightBits(model);
                            trainer.Fit(slice, 2, 8);
                            trainer.Step(inner, 2, 8);
                            Assert.True(!Data.WeightBits(model).SequenceEqual(before), "training moved the weights, round " + round);
                        }
                    }
                }
            }
        }

        [Test]
        public static void ASubsetHasTheRowsListedInOrderRepeatsIncluded()
        {
            float[] x; int[] y;
            Data.Blobs(30, 7, out x, out y);
            int[] listed = { 15, 10, 15, 12 }; // rows 5, 0, 5, 2 of the slice from row 10
            float[] samples = listed.SelectMany(r => x.Skip(r * Data.Features).Take(Data.Features)).ToArray();
            int[] labels = listed.Select(r => y[r]).ToArray();
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Options(Precision.Fp32, false)))
            using (Dataset whole = Make(ctx, x, y, false))
            using (Dataset slice = whole.Slice(10, 12))
            using (Dataset subset = slice.Subset(new long[] { 5, 0, 5, 2 }))
            using (Dataset copies = Make(ctx, samples, labels, false))
            {
                Assert.Equal(4L, subset.Rows, "rows of the subset");
                Assert.SequenceEqual(labels, subset.GetLabels(), "labels of the subset");
                Assert.SequenceEqual(Data.Bits(trainer.PredictDataset(copies)), Data.Bits(trainer.PredictDataset(subset)),
                                     "prediction bits of the subset");
            }
        }

        [Test]
        public static void ASubsetOfRowsOutOfRangeOrOfNoneIsAnInvalidArgument()
        {
            float[] x; int[] y;
            Data.Blobs(30, 8, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset slice = data.Slice(20, 10))
            {
                MptException error = Assert.Fails(Status.InvalidArgument, () => data.Subset(new long[] { 0, 1, 30 }));
                Assert.True(error.NativeMessage.Contains("row 2 of the list is 30"), "the library's message: " + error.NativeMessage);
                Assert.Fails(Status.InvalidArgument, () => data.Subset(new long[0]));
                Assert.Fails(Status.InvalidArgument, () => slice.Subset(new long[] { -1 }));
                Assert.Fails(Status.InvalidArgument, () => slice.Subset(new long[] { 3, 4, 10 }));
                Assert.Throws<ArgumentNullException>(() => data.Subset(null));
                using (Dataset last = data.Subset(new long[] { 29 })) Assert.Equal(1L, last.Rows, "rows of subset { 29 }");
            }
        }
    }
}
