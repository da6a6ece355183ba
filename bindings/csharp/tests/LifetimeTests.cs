// Lifetimes and threads: objects disposed in any order, in their own callback or left to finalizers; other
// threads and finalizers while a fit runs; contexts training in parallel, shared objects serialised.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;

namespace Mptrain.Tests
{
    public static class LifetimeTests
    {
        [Test]
        public static void OtherThreadsWaitForAFitButItsOwnCallbacksAreRefused()
        {
            float[] x; int[] y;
            Data.Blobs(300, 11, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                var inCallback = new ManualResetEventSlim();
                var refusals = new Dictionary<string, string>();
                Status? evaluateFromProgress = null; // refused by the library itself (TheEpochEndCallbackMayEvaluate...)
                trainer.SetCallbacks(p =>
                {
                    if (inCallback.IsSet) return;
                    var calls = new Dictionary<string, Action>
                    {
                        { "Fit", () => trainer.Fit(data, 1, 30) },
                        { "Step", () => trainer.Step(data, 0, 30) },
                    };
                    foreach (var call in calls)
                    {
                        try { call.Value(); refusals[call.Key] = "nothing thrown"; }
                        catch (MptException error) { refusals[call.Key] = error.Message; }
                    }
                    try { trainer.Evaluate(data); evaluateFromProgress = Status.Ok; }
                    catch (MptException error) { evaluateFromProgress = error.Status; }
                    inCallback.Set();
                    Thread.Sleep(300); // the other thread's calls below arrive while this fit holds the lock
                });
                Exception failure = null;
                var fitter = new Thread(() => { try { trainer.Fit(data, 2, 30); } catch (Exception e) { failure = e; } });
                fitter.Start();
                Assert.True(inCallback.Wait(TimeSpan.FromSeconds(30)), "the fit reached its callback");
                trainer.Evaluate(data); // waits for the fit, as calls on one context are serialised
                trainer.Step(data, 0, 30);
                fitter.Join();
                Assert.True(failure == null, "the fit succeeded: " + failure);
                Assert.Equal(2L, trainer.Progress.Epochs, "epochs");
                foreach (var refusal in refusals)
                    Assert.True(refusal.Value.StartsWith("MPT_STATUS_INVALID_STATE: ") && refusal.Value.Contains(refusal.Key),
                                refusal.Key + " from the trainer's own callback: " + refusal.Value);
                Assert.Equal(2, refusals.Count, "refusals");
                Assert.Equal((Status?)Status.InvalidState, evaluateFromProgress, "Evaluate from the progress callback");
            }
        }

        // Trainers left to the finalizer, each holding an arena in the context's memory; a method of its
        // own, so no local of the caller keeps them reachable.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void AbandonTrainers(Model model, Dataset data)
        {
            for (int i = 0; i < 10; i++) new Trainer(model).Step(data, 0, 30);
        }

        [Test]
        public static void FinalizersDoNotWaitForAFitInProgress()
        {
            float[] x; int[] y;
            Data.Blobs(300, 12, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                trainer.Fit(data, 1, 30); // plans its arena, so the context's memory below moves with the others only
                AbandonTrainers(model, data);
                ulong withAbandoned = ctx.Memory.Used;
                bool finalized = true;
                trainer.SetCallbacks(p =>
                {
                    if (p.Step != 1) return;
                    // The fit holds the context's lock here: a finalizer waiting for it would stall the
                    // finalizer thread (and deadlock a WaitForPendingFinalizers on this thread), so the
                    // wait happens on another thread, with a bound.
                    var waiter = new Thread(() => { GC.Collect(); GC.WaitForPendingFinalizers(); }) { IsBackground = true };
                    waiter.Start();
                    finalized = waiter.Join(TimeSpan.FromSeconds(10));
                });
                trainer.Fit(data, 1, 30);
                Assert.True(finalized, "finalizers ran while the fit was in a callback");
                Assert.True(ctx.Memory.Used < withAbandoned, "the abandoned trainers were destroyed once the fit let go of the lock");
            }
        }

        [Test]
        public static void DisposingTheTrainerInItsOwnCallbackCancelsFit()
        {
            float[] x; int[] y;
            Data.Blobs(90, 13, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                foreach (bool atEpochEnd in new[] { false, true })
                {
                    var trainer = new Trainer(model);
                    int calls = 0;
                    if (atEpochEnd) trainer.SetCallbacks(null, e => { calls++; trainer.Dispose(); });
                    else trainer.SetCallbacks(p => { calls++; trainer.Dispose(); trainer.Dispose(); });
                    Assert.Fails(Status.Cancelled, () => trainer.Fit(data, 3, 30));
                    Assert.Equal(1, calls, "callbacks (epoch end: " + atEpochEnd + ")");
                    Assert.True(trainer.IsDisposed, "disposed");
                    Assert.Throws<ObjectDisposedException>(() => trainer.Predict(new float[Data.Features]));
                    trainer.Dispose(); // the library freed the trainer as fit returned: nothing to destroy again
                }
                using (var trainer = new Trainer(model))
                {
                    trainer.Fit(data, 1, 30);
                    Assert.Equal(1L, trainer.Progress.Epochs, "the model and data set still train");
                }
            }
        }

        [Test]
        public static void ObjectsMayBeDisposedInAnyOrderOrLeftToTheFinalizer()
        {
            float[] x; int[] y;
            Data.Blobs(60, 9, out x, out y);
            Context ctx = Data.CpuContext();
            Model model = Data.Mlp(ctx);
            Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
            var trainer = new Trainer(model);
            trainer.SetCallbacks(p => { });
            ctx.Dispose();
            model.Dispose();
            trainer.Fit(data, 1, 20);
            data.Dispose();
            Assert.Equal(3, trainer.Predict(new float[Data.Features]).Length, "predict after the others are gone");
            trainer.Dispose();
            trainer.Dispose(); // idempotent
            for (int i = 0; i < 20; i++) // abandoned objects, released by finalizers in any order
            {
                var abandonedContext = Data.CpuContext();
                var abandonedTrainer = new Trainer(Data.Mlp(abandonedContext));
                abandonedTrainer.SetCallbacks(p => { });
            }
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        [Test]
        public static void ContextsTrainInParallelAndSharedObjectsAreSerialised()
        {
            var accuracies = new float[3];
            Exception failure = null;
            var threads = Enumerable.Range(0, 3).Select(i => new Thread(() =>
            {
                try
                {
                    float[] x; int[] y;
                    Data.Blobs(120, 10 + i, out x, out y);
                    using (Context ctx = Data.CpuContext((ulong)i))
                    using (Model model = Data.Mlp(ctx))
                    using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                    using (var trainer = new Trainer(model, Data.Adam))
                    {
                        trainer.Fit(data, 3, 16);
                        accuracies[i] = trainer.Evaluate(data).Accuracy;
                    }
                }
                catch (Exception error) { failure = error; }
            })).ToList();
            threads.ForEach(t => t.Start());
            threads.ForEach(t => t.Join());
            Assert.True(failure == null, "no failure: " + failure);
            Assert.True(accuracies.All(a => a > 0.8f), "accuracies " + string.Join(", ", accuracies));

            float[] xs; int[] ys;
            Data.Blobs(120, 20, out xs, out ys);
            using (Context shared = Data.CpuContext())
            using (Model model = Data.Mlp(shared))
            using (Dataset data = Dataset.FromF32(shared, xs, Data.Features, ys, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                var fitter = new Thread(() => { try { for (int i = 0; i < 3; i++) trainer.Fit(data, 1, 16); } catch (Exception e) { failure = e; } });
                var reader = new Thread(() =>
                {
                    try { for (int i = 0; i < 50; i++) { model.Predict(new float[Data.Features]); float[] w, b; model.GetWeights(0, out w, out b); } }
                    catch (Exception e) { failure = e; }
                });
                fitter.Start(); reader.Start();
                fitter.Join(); reader.Join();
                Assert.True(failure == null, "no failure: " + failure);
                Assert.Equal(3L, trainer.Progress.Epochs, "epochs");
            }
        }
    }
}
