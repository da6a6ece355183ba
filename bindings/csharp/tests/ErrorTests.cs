// Bad input becomes a .NET exception: MptException (status + message) for what the library refuses,
// ArgumentNullException for nulls, ObjectDisposedException after Dispose. Never a crash.
using System;

namespace Mptrain.Tests
{
    public static class ErrorTests
    {
        [Test]
        public static void OutOfRangeLabelsAreRefusedWithTheLibraryMessage()
        {
            using (Context ctx = Data.CpuContext())
            {
                MptException error = Assert.Fails(Status.InvalidArgument, () => Dataset.FromF32(ctx, new float[8], 4, new[] { 0, 5 }, 3));
                Assert.True(error.NativeMessage.Contains("label 5"), error.NativeMessage);
                Assert.True(error.Message.StartsWith("MPT_STATUS_INVALID_ARGUMENT: "), error.Message);
                Assert.Fails(Status.InvalidArgument, () => Dataset.FromF32(ctx, new float[8], 4, new[] { 0, -1 }, 3));
                Assert.Fails(Status.InvalidArgument, () => Dataset.FromU8(ctx, new byte[8], 4, new[] { 0, 1 }, 0));
            }
        }

        [Test]
        public static void WrongLengthsAreShapeMismatches()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = new Model(ctx, Data.Features).AddDense(3, Activation.Softmax))
            {
                Assert.Fails(Status.ShapeMismatch, () => Dataset.FromF32(ctx, new float[7], 4, new[] { 0, 1 }, 3));
                Assert.Fails(Status.ShapeMismatch, () => Dataset.FromF32(ctx, new float[0], 4, new int[0], 3));
                Assert.Fails(Status.ShapeMismatch, () => Dataset.FromTargets(ctx, new float[8], 4, new float[5], 2));
                Assert.Fails(Status.ShapeMismatch, () => model.Predict(new float[5]));
                MptException empty = Assert.Fails(Status.ShapeMismatch, () => model.Predict(new float[0]));
                Assert.Equal("inputs has no rows: at least one is needed", empty.NativeMessage);
                Assert.Fails(Status.ShapeMismatch, () => model.SetWeights(0, new float[3], new float[3]));
                float[] w, b;
                Assert.Fails(Status.InvalidArgument, () => model.GetWeights(3, out w, out b));
                using (var trainer = new Trainer(model))
                using (Dataset wide = Dataset.FromF32(ctx, new float[10], 5, new[] { 0, 1 }, 3))
                {
                    Assert.Fails(Status.ShapeMismatch, () => trainer.Predict(new float[3]));
                    Assert.Fails(Status.ShapeMismatch, () => trainer.Fit(wide, 1, 2));
                    using (Context other = Data.CpuContext())
                    using (Dataset foreign = Dataset.FromF32(other, new float[8], 4, new[] { 0, 1 }, 3))
                        Assert.Fails(Status.InvalidArgument, () => trainer.Fit(foreign, 1, 2));
                }
            }
        }

        [Test]
        public static void NullArgumentsAreArgumentNullExceptions()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model))
            {
                Assert.Throws<ArgumentNullException>(() => new Model(null, 3));
                Assert.Throws<ArgumentNullException>(() => new Trainer(null));
                Assert.Throws<ArgumentNullException>(() => Dataset.FromF32(ctx, null, 4, new[] { 0 }, 3));
                Assert.Throws<ArgumentNullException>(() => Dataset.FromF32(null, new float[4], 4, new[] { 0 }, 3));
                Assert.Throws<ArgumentNullException>(() => Dataset.LoadCifar10(ctx, null, true));
                Assert.Throws<ArgumentNullException>(() => trainer.Fit(null, 1, 1));
                Assert.Throws<ArgumentNullException>(() => model.Predict(null));
                Assert.Throws<ArgumentNullException>(() => trainer.Predict(null));
            }
        }

        [Test]
        public static void DisposedObjectsThrowObjectDisposedException()
        {
            float[] x; int[] y;
            Data.Blobs(30, 1, out x, out y);
            Context ctx = Data.CpuContext();
            Model model = Data.Mlp(ctx);
            Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
            var trainer = new Trainer(model);
            data.Dispose();
            Assert.True(data.IsDisposed, "IsDisposed");
            Assert.Throws<ObjectDisposedException>(() => trainer.Fit(data, 1, 10));
            Assert.Throws<ObjectDisposedException>(() => { long rows = data.Rows; });
            trainer.Dispose();
            Assert.Throws<ObjectDisposedException>(() => trainer.Predict(new float[Data.Features]));
            Assert.Throws<ObjectDisposedException>(() => trainer.SetCallbacks(p => { }));
            model.Dispose();
            Assert.Throws<ObjectDisposedException>(() => model.AddDense(3, Activation.Relu));
            ctx.Dispose();
            Assert.Throws<ObjectDisposedException>(() => new Model(ctx, 3));
            Assert.Throws<ObjectDisposedException>(() => { Backend backend = ctx.Backend; });
            Assert.Throws<ObjectDisposedException>(() => ctx.Describe());
        }

        [Test]
        public static void InvalidValuesAndStatesComeBackFromTheLibrary()
        {
            using (Context ctx = Data.CpuContext())
            {
                Assert.Fails(Status.InvalidArgument, () => new Context(new ContextOptions { Threads = -1 }));
                Assert.Fails(Status.InvalidArgument, () => new Model(ctx, 3).AddDense(2, (Activation)99));
                Assert.Fails(Status.NonFinite, () => Dataset.FromF32(ctx, new[] { float.NaN, 0, 0, 0 }, 4, new[] { 0 }, 3));
                Dataset.FromF32(ctx, new[] { float.NaN, 0, 0, 0 }, 4, new[] { 0 }, 3, checkFinite: false).Dispose();
                using (var empty = new Model(ctx, 3))
                {
                    Assert.Fails(Status.InvalidState, () => new Trainer(empty));
                    empty.AddDense(2, Activation.Relu);
                    Assert.Fails(Status.InvalidArgument, () => new Trainer(empty, new TrainerOptions { LearningRate = -1 }));
                    Assert.Fails(Status.InvalidArgument, () => new Trainer(empty, new TrainerOptions { Momentum = 1.5f }));
                    using (var trainer = new Trainer(empty))
                    using (Dataset data = Dataset.FromF32(ctx, new float[30], 3, new int[10], 2))
                    {
                        Assert.Fails(Status.InvalidState, () => empty.AddDense(2, Activation.Linear));
                        Assert.Fails(Status.InvalidArgument, () => trainer.Fit(data, 1, 0));
                        Assert.Fails(Status.InvalidArgument, () => trainer.Step(data, 5, 10));
                        Assert.Fails(Status.InvalidArgument, () => trainer.Evaluate(data, -1));
                        trainer.Fit(data, 1, 5); // still usable after the errors
                    }
                }
                Assert.Fails(Status.IoError, () => Dataset.LoadCifar10(ctx, "/nonexistent/cifar-10-batches-bin", true));
            }
        }

        [Test]
        public static void BuffersBeyondTheLibraryLimitOrAnyMemoryAreMptExceptionsNotOverflows()
        {
            using (Context ctx = Data.CpuContext())
            {
                // One 2^24 x 2^24 layer: 2^48 floats, more than any address space (and any array).
                using (Model huge = new Model(ctx, 1L << 24).AddDense(1L << 24, Activation.Linear))
                {
                    float[] w, b;
                    Assert.Fails(Status.OutOfMemory, () => huge.GetWeights(0, out w, out b));
                }
                // 2^21 rows of 2^20 outputs are 2^41 floats, over the library's 2^40: refused with its
                // status and message (it checks the rows before the output count) before any allocation.
                using (Model wide = new Model(ctx, 1).AddDense(1L << 20, Activation.Linear))
                using (var trainer = new Trainer(wide))
                {
                    var inputs = new float[1 << 21];
                    const string outputs = "the outputs (rows * output features) would hold more than 2^40 elements";
                    Assert.Equal(outputs, Assert.Fails(Status.InvalidArgument, () => wide.Predict(inputs)).NativeMessage);
                    Assert.Equal(outputs, Assert.Fails(Status.InvalidArgument, () => trainer.Predict(inputs)).NativeMessage);
                }
                // 4 rows of 2^62 + 1 overflow long; 2 rows of 2^40 do not, but exceed 2^40 all the same.
                const string dataset = "the dataset (rows * features) would hold more than 2^40 elements";
                foreach (long features in new[] { (1L << 62) + 1, 1L << 40 })
                {
                    int[] labels = new int[features == 1L << 40 ? 2 : 4];
                    Assert.Equal(dataset, Assert.Fails(Status.InvalidArgument,
                        () => Dataset.FromF32(ctx, new float[4], features, labels, 2)).NativeMessage);
                    Assert.Equal(dataset, Assert.Fails(Status.InvalidArgument,
                        () => Dataset.FromU8(ctx, new byte[4], features, labels, 2)).NativeMessage);
                    Assert.Equal(dataset, Assert.Fails(Status.InvalidArgument,
                        () => Dataset.FromTargets(ctx, new float[4], features, new float[labels.Length], 1)).NativeMessage);
                }
            }
        }
    }
}
