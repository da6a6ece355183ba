// Fit's callbacks: progress and epoch-end callbacks see every step, stop fit, rethrow exceptions, use the
// model and evaluate a validation set; the log callback gets messages, and a throwing logger is contained.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Mptrain.Tests
{
    public static class CallbackTests
    {
        [Test]
        public static void CallbacksSeeEveryStepAndStopEndsTraining()
        {
            float[] x; int[] y;
            Data.Blobs(300, 5, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, Data.Adam))
            {
                var steps = new List<string>();
                var epochs = new List<long>();
                trainer.SetCallbacks(p => steps.Add(p.Epoch + "." + p.Step + "/" + p.StepsPerEpoch), e => epochs.Add(e.Epoch));
                trainer.Fit(data, 2, 100);
                Assert.SequenceEqual(new[] { "0.1/3", "0.2/3", "0.3/3", "1.1/3", "1.2/3", "1.3/3" }, steps, "steps");
                Assert.SequenceEqual(new[] { 0L, 1L }, epochs, "epochs");
                Assert.Equal(new UnfinishedEpoch(), trainer.UnfinishedEpoch, "no unfinished epoch");
                trainer.SetCallbacks(p => p.Stop = p.Step == 2);
                Assert.Fails(Status.Cancelled, () => trainer.Fit(data, 3, 100));
                Assert.Equal(new UnfinishedEpoch { Steps = 2, Rows = 300, BatchSize = 100 }, trainer.UnfinishedEpoch,
                             "the cancelled epoch");
                trainer.SetCallbacks(null, e => e.Stop = true);
                Assert.Fails(Status.Cancelled, () => trainer.Fit(data, 3, 100));
                Assert.Equal(1L, trainer.Progress.Epochs - 2, "stopped after one more epoch");
                Assert.Equal(new UnfinishedEpoch(), trainer.UnfinishedEpoch, "that epoch finished");
                trainer.SetCallbacks(null);
                trainer.Fit(data, 1, 100);
            }
        }

        [Test]
        public static void AnExceptionInACallbackStopsFitAndIsRethrown()
        {
            float[] x; int[] y;
            Data.Blobs(90, 6, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                int calls = 0;
                trainer.SetCallbacks(p => { calls++; throw new InvalidOperationException("from the callback"); });
                var error = Assert.Throws<InvalidOperationException>(() => trainer.Fit(data, 2, 30));
                Assert.Equal("from the callback", error.Message, "message");
                Assert.Equal(1, calls, "calls");
                trainer.SetCallbacks(null, e => trainer.Fit(data, 1, 30)); // re-entry is refused
                Assert.Fails(Status.InvalidState, () => trainer.Fit(data, 1, 30));
                trainer.SetCallbacks(null);
                trainer.Fit(data, 1, 30); // still usable
            }
        }

        [Test]
        public static void TheEpochEndCallbackMayEvaluateAValidationSetAsBetweenOneEpochFits()
        {
            float[] x, heldX; int[] y, heldY;
            Data.Blobs(160, 31, out x, out y); // 10 steps of 16
            Data.Blobs(70, 32, out heldX, out heldY);
            var duringFit = new List<Evaluation>();
            Status? fromProgress = null, foreign = null;
            // One seed: the same initial weights and shuffles.
            using (Context ctx = Data.CpuContext(17))
            using (Model model = Data.Mlp(ctx))
            using (Dataset training = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset validation = Dataset.FromF32(ctx, heldX, Data.Features, heldY, Data.Classes))
            using (Context other = Data.CpuContext(17))
            using (Dataset stranger = Dataset.FromF32(other, heldX, Data.Features, heldY, Data.Classes))
            using (var trainer = new Trainer(model, Data.Adam))
            {
                trainer.SetCallbacks(
                    p =>
                    {
                        if (p.Step != 2 || fromProgress.HasValue) return;
                        try { trainer.Evaluate(validation); fromProgress = Status.Ok; }
                        catch (MptException error) { fromProgress = error.Status; }
                    },
                    e =>
                    {
                        duringFit.Add(trainer.Evaluate(validation));
                        if (foreign.HasValue) return;
                        try { trainer.Evaluate(stranger); foreign = Status.Ok; }
                        catch (MptException error) { foreign = error.Status; }
                    });
                trainer.Fit(training, 3, 16);
                Assert.Equal(30L, trainer.Progress.Steps, "steps");
                Assert.Equal(3L, trainer.Progress.Epochs, "epochs");
            }
            Assert.Equal((Status?)Status.InvalidState, fromProgress, "Evaluate from the progress callback (steps in flight)");
            Assert.Equal((Status?)Status.InvalidArgument, foreign, "Evaluate of another context's data set");
            Assert.Equal(3, duringFit.Count, "evaluations from the epoch-end callback");

            using (Context ctx = Data.CpuContext(17))
            using (Model model = Data.Mlp(ctx))
            using (Dataset training = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset validation = Dataset.FromF32(ctx, heldX, Data.Features, heldY, Data.Classes))
            using (var trainer = new Trainer(model, Data.Adam))
            {
                for (int epoch = 0; epoch < 3; epoch++)
                {
                    trainer.Fit(training, 1, 16);
                    Evaluation between = trainer.Evaluate(validation);
                    // Bit for bit on the CPU.
                    Assert.Equal(BitConverter.SingleToInt32Bits(between.Loss), BitConverter.SingleToInt32Bits(duringFit[epoch].Loss),
                                 "loss bits after epoch " + epoch + " (" + between.Loss + " between fits, " + duringFit[epoch].Loss + " during fit)");
                    Assert.Equal(BitConverter.SingleToInt32Bits(between.Accuracy), BitConverter.SingleToInt32Bits(duringFit[epoch].Accuracy),
                                 "accuracy bits after epoch " + epoch);
                }
            }
            Assert.True(duringFit[2].Loss < duringFit[0].Loss, "the validation loss falls");
        }

        [Test]
        public static void CallbacksMayUseTheModelDuringFit()
        {
            float[] x; int[] y;
            Data.Blobs(90, 7, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                var biases = new List<float[]>();
                trainer.SetCallbacks(null, e => { float[] w, b; model.GetWeights(1, out w, out b); biases.Add(b); });
                trainer.Fit(data, 2, 30);
                Assert.Equal(2, biases.Count, "epochs seen");
                Assert.True(!biases[0].SequenceEqual(biases[1]), "the bias changed between epochs");
            }
        }

        [Test]
        public static void LogCallbackReceivesMessagesAndAThrowingLoggerIsContained()
        {
            float[] x; int[] y;
            Data.Blobs(60, 8, out x, out y);
            var messages = new List<string>();
            foreach (bool throwing in new[] { false, true })
            {
                var options = new ContextOptions
                {
                    Backend = Backend.Cpu, Threads = 1, LogLevel = LogLevel.Debug,
                    Log = (level, text) => { if (throwing) throw new Exception("logger"); messages.Add(level + ": " + text); },
                };
                Model model;
                Dataset data;
                using (var ctx = new Context(options))
                {
                    model = Data.Mlp(ctx);
                    data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
                } // the model keeps the C context, and so the logger, alive
                using (model)
                using (data)
                using (var trainer = new Trainer(model))
                    trainer.Fit(data, 1, 20);
            }
            Assert.True(messages.All(m => m != null), "messages are strings");
        }
    }
}
