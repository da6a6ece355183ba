// Model files and training checkpoints: a loaded model predicts bit-identically, a run resumed from a
// checkpoint ends with bit-identical weights, and bad files throw MptException with their status.
using System;
using System.IO;
using System.Linq;

namespace Mptrain.Tests
{
    public static class FileTests
    {
        static readonly TrainerOptions Adam = new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f };

        static Model Mlp(Context ctx)
        {
            return new Model(ctx, Data.Features).AddDense(16, Activation.Relu).AddDense(8, Activation.Tanh)
                                                .AddDense(Data.Classes, Activation.Softmax);
        }

        static Dataset Blobs(Context ctx, int rows, int seed)
        {
            float[] x; int[] y;
            Data.Blobs(rows, seed, out x, out y);
            return Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
        }

        static long[] SavedSteps(string directory)
        {
            return Directory.GetFiles(directory).Select(System.IO.Path.GetFileName).Select(name =>
            {
                Assert.True(name.StartsWith("checkpoint-") && name.EndsWith(".safetensors"), "unexpected file " + name);
                return long.Parse(name.Substring("checkpoint-".Length, name.Length - "checkpoint-".Length - ".safetensors".Length));
            }).OrderBy(step => step).ToArray();
        }

        [Test]
        public static void ASavedModelLoadsAndPredictsBitIdentically()
        {
            float[] points; int[] unused;
            Data.Blobs(30, 12, out points, out unused);
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Context other = Data.CpuContext(99))
            using (Model model = Mlp(ctx))
            using (Dataset data = Blobs(ctx, 120, 11))
            using (var trainer = new Trainer(model, Adam))
            {
                trainer.Fit(data, 2, 16);
                string path = dir.File("model.safetensors");
                model.Save(path);
                model.Save(path); // overwrites
                using (Model loaded = Model.Load(other, path))
                using (Dataset otherData = Blobs(other, 60, 13))
                {
                    Assert.Equal(3L, loaded.LayerCount, "layers");
                    Assert.Equal((long)Data.Features, loaded.InputFeatures, "inputs");
                    Assert.Equal((long)Data.Classes, loaded.OutputFeatures, "outputs");
                    Assert.Equal(model.ParameterCount, loaded.ParameterCount, "parameters");
                    Assert.SequenceEqual(Data.WeightBits(model), Data.WeightBits(loaded), "weight bits");
                    Assert.SequenceEqual(Data.Bits(model.Predict(points)), Data.Bits(loaded.Predict(points)), "prediction bits");
                    using (var again = new Trainer(loaded, Adam)) again.Fit(otherData, 1, 20); // it trains like any other
                }
            }
        }

        [Test]
        public static void EveryHiddenActivationTrainsAndReloads()
        {
            float[] points; int[] unused;
            Data.Blobs(30, 15, out points, out unused);
            Activation[] hidden = { Activation.Linear, Activation.Relu, Activation.Sigmoid, Activation.Tanh, Activation.LeakyRelu,
                                    Activation.Elu, Activation.Selu, Activation.Softplus, Activation.Softsign };
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Model model = new Model(ctx, Data.Features))
            using (Dataset data = Blobs(ctx, 120, 14))
            {
                foreach (Activation activation in hidden) model.AddDense(6, activation);
                model.AddDense(Data.Classes, Activation.Softmax);
                model.SetLayerDType(1, DType.Bf16);
                using (var trainer = new Trainer(model, Adam)) trainer.Fit(data, 1, 16);
                string path = dir.File("activations.safetensors");
                model.Save(path);
                using (Model loaded = Model.Load(ctx, path))
                {
                    Assert.SequenceEqual(Data.Bits(model.Predict(points)), Data.Bits(loaded.Predict(points)), "prediction bits");
                    for (int layer = 0; layer < hidden.Length; layer++)
                    {
                        Assert.Equal(hidden[layer], loaded.GetLayerActivation(layer), "activation of layer " + layer);
                        Assert.Equal(6L, loaded.GetLayerUnits(layer), "units of layer " + layer);
                    }
                    Assert.Equal(Activation.Softmax, loaded.GetLayerActivation(hidden.Length), "the last layer's activation");
                    Assert.Equal((long)Data.Classes, loaded.GetLayerUnits(hidden.Length), "the last layer's units");
                    Assert.Fails(Status.InvalidArgument, () => loaded.GetLayerUnits(hidden.Length + 1));
                    Assert.Fails(Status.InvalidArgument, () => loaded.GetLayerUnits(-1));
                    Assert.Fails(Status.InvalidArgument, () => loaded.GetLayerActivation(-1));
                    Assert.Fails(Status.InvalidArgument, () => loaded.GetLayerDType(-1));
                    Assert.Equal(DType.Default, loaded.GetLayerDType(0), "layer 0's dtype");
                    Assert.Equal(DType.Bf16, loaded.GetLayerDType(1), "layer 1's dtype");
                }
            }
        }

        [Test]
        public static void AnInitializerDrawsTheFirstWeightsAndIsNotSaved()
        {
            Func<Context, Initializer?, Model> firstLayer = (ctx, initializer) =>
            {
                var model = new Model(ctx, Data.Features).AddDense(64, Activation.Selu).AddDense(Data.Classes, Activation.Softmax);
                if (initializer.HasValue) model.SetLayerInitializer(0, initializer.Value);
                return model;
            };
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext(4))
            using (Context again = Data.CpuContext(4))
            using (Model plain = firstLayer(ctx, null))
            using (Model lecun = firstLayer(ctx, Initializer.LecunNormal))
            using (Model same = firstLayer(again, Initializer.LecunNormal))
            {
                Func<Model, int[]> firstWeights = model =>
                {
                    float[] weights, bias;
                    model.GetWeights(0, out weights, out bias);
                    return Data.Bits(weights);
                };
                Assert.Equal(Initializer.GlorotUniform, plain.GetLayerInitializer(0), "default");
                Assert.Equal(Initializer.LecunNormal, lecun.GetLayerInitializer(0), "set");
                Assert.SequenceEqual(firstWeights(same), firstWeights(lecun), "one seed, one draw");
                Assert.True(!firstWeights(plain).SequenceEqual(firstWeights(lecun)), "drawn otherwise");
                var refused = Assert.Throws<MptException>(() => lecun.SetLayerInitializer(0, Initializer.HeNormal));
                Assert.Equal(Status.InvalidState, refused.Status, "after the build");
                string path = dir.File("lecun.safetensors");
                lecun.Save(path);
                using (Model loaded = Model.Load(ctx, path))
                {
                    Assert.Equal(Initializer.GlorotUniform, loaded.GetLayerInitializer(0), "not saved");
                    Assert.SequenceEqual(firstWeights(lecun), firstWeights(loaded), "weights saved");
                }
            }
        }

        [Test]
        public static void ARunResumedFromACheckpointEndsBitIdentical()
        {
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Blobs(ctx, 200, 21)) // 6 steps of 32 per epoch
            using (Model model = Mlp(ctx))
            using (var trainer = new Trainer(model, Adam))
            using (Model resumedModel = Mlp(ctx))
            {
                string path = dir.File("checkpoint.safetensors");
                trainer.Fit(data, 1, 32);
                trainer.SaveCheckpoint(path);
                trainer.Fit(data, 2, 32);
                int[] uninterrupted = Data.WeightBits(model);
                Assert.True(!Data.WeightBits(resumedModel).SequenceEqual(uninterrupted), "fresh weights differ");
                using (var resumed = new Trainer(resumedModel, Adam))
                {
                    resumed.LoadCheckpoint(path);
                    Assert.Equal(6L, resumed.Progress.Steps, "steps after loading");
                    Assert.Equal(1L, resumed.Progress.Epochs, "epochs after loading");
                    resumed.Fit(data, 2, 32);
                    Assert.SequenceEqual(uninterrupted, Data.WeightBits(resumedModel), "weight bits");
                    Assert.Equal(trainer.Progress, resumed.Progress, "progress");
                    Assert.Equal(trainer.LossScale, resumed.LossScale, "loss scale");
                }
                using (Model fromCheckpoint = Model.Load(ctx, path)) // a checkpoint holds the model too
                    Assert.Equal(3L, fromCheckpoint.LayerCount, "layers of the checkpoint's model");
            }
        }

        [Test]
        public static void AModelSavedWithDropoutAndACheckpointsModelLoadWithTheSameRates()
        {
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Context other = Data.CpuContext(99))
            using (Model model = Mlp(ctx))
            using (Dataset data = Blobs(ctx, 60, 11))
            {
                model.SetLayerDropout(0, 0.25f);
                model.SetLayerDropout(1, 0.5f);
                model.SetInputDropout(0.125f);
                Assert.Equal(0.125f, model.GetInputDropout(), "input dropout");
                using (Model refusing = Mlp(ctx)) Assert.Fails(Status.InvalidArgument, () => refusing.SetInputDropout(1.0f));
                string path = dir.File("dropout.safetensors"), checkpoint = dir.File("checkpoint.safetensors");
                using (var trainer = new Trainer(model, Adam))
                {
                    trainer.Fit(data, 1, 16);
                    model.Save(path);
                    trainer.SaveCheckpoint(checkpoint);
                }
                foreach (string file in new[] { path, checkpoint })
                    using (Model loaded = Model.Load(other, file))
                    {
                        Assert.SequenceEqual(new[] { 0.25f, 0.5f, 0.0f }, Enumerable.Range(0, 3).Select(loaded.GetLayerDropout),
                                             "rates loaded from " + file);
                        Assert.SequenceEqual(Data.WeightBits(model), Data.WeightBits(loaded), "weight bits loaded from " + file);
                        Assert.Fails(Status.InvalidState, () => loaded.SetLayerDropout(0, 0.0f)); // a loaded model is built
                        Assert.Equal(0.125f, loaded.GetInputDropout(), "input dropout loaded from " + file);
                        Assert.Fails(Status.InvalidState, () => loaded.SetInputDropout(0.0f));
                    }
                using (Model plain = Mlp(ctx)) plain.Save(path); // overwritten without dropout: the rates are the file's
                using (Model reloaded = Model.Load(other, path))
                    Assert.SequenceEqual(new[] { 0.0f, 0.0f, 0.0f }, Enumerable.Range(0, 3).Select(reloaded.GetLayerDropout),
                                         "rates of a file without dropout");
            }
        }

        [Test]
        public static void ALearningRateHalvedFromTheEpochEndCallbackIsSavedAndRestored()
        {
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Blobs(ctx, 200, 41))
            using (Model model = Mlp(ctx))
            using (var trainer = new Trainer(model, Adam))
            using (Model resumedModel = Mlp(ctx))
            using (var resumed = new Trainer(resumedModel, Adam))
            {
                string path = dir.File("decayed.safetensors");
                Assert.Equal(0.01f, trainer.LearningRate, "the options' rate");
                trainer.SetCallbacks(null, e => trainer.LearningRate /= 2);
                trainer.Fit(data, 2, 32);
                Assert.Equal(0.0025f, trainer.LearningRate, "after two halvings");
                trainer.SaveCheckpoint(path);
                trainer.SetCallbacks(null);
                trainer.Fit(data, 1, 32);

                resumed.LearningRate = 0.5f;
                resumed.LoadCheckpoint(path);
                Assert.Equal(0.0025f, resumed.LearningRate, "the checkpoint's rate");
                resumed.Fit(data, 1, 32);
                Assert.SequenceEqual(Data.WeightBits(model), Data.WeightBits(resumedModel), "weight bits");
                foreach (float bad in new[] { 0f, -1f, float.NaN, float.PositiveInfinity })
                {
                    var error = Assert.Throws<MptException>(() => trainer.LearningRate = bad);
                    Assert.Equal(Status.InvalidArgument, error.Status, "status for a rate of " + bad);
                }
                Assert.Equal(0.0025f, trainer.LearningRate, "unchanged by refused rates");
            }
        }

        [Test]
        public static void ACheckpointWrittenWithLabelSmoothingIsRefusedByATrainerWithoutIt()
        {
            var smoothedOptions = new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f, LabelSmoothing = 0.1f };
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Blobs(ctx, 60, 43))
            using (Model model = Mlp(ctx))
            using (var smoothed = new Trainer(model, smoothedOptions))
            using (var plain = new Trainer(model, Adam))
            using (var other = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f, LabelSmoothing = 0.2f }))
            using (var matching = new Trainer(model, smoothedOptions))
            {
                string path = dir.File("smoothed.safetensors");
                smoothed.Step(data, 0, 20);
                smoothed.SaveCheckpoint(path);
                MptException error = Assert.Fails(Status.InvalidArgument, () => plain.LoadCheckpoint(path));
                Assert.True(error.NativeMessage.Contains("label_smoothing 0.1 (this trainer: 0)"), "the message: " + error.NativeMessage);
                Assert.Fails(Status.InvalidArgument, () => other.LoadCheckpoint(path));
                matching.LoadCheckpoint(path);
                Assert.Equal(1L, matching.Progress.Steps, "the checkpoint's step count");
            }
        }

        [Test]
        public static void ALionCheckpointResumesWithTheSameBetasAndIsRefusedWithOthers()
        {
            Func<float, float, TrainerOptions> lion = (beta1, beta2) =>
                new TrainerOptions { Optimizer = Optimizer.Lion, LearningRate = 0.001f, LionBeta1 = beta1, LionBeta2 = beta2 };
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Blobs(ctx, 20, 43))
            using (Model model = Mlp(ctx))
            using (var saved = new Trainer(model, lion(0.8f, 0.95f)))
            using (var matching = new Trainer(model, lion(0.8f, 0.95f)))
            using (var other = new Trainer(model, lion(0.8f, 0.98f)))
            {
                string path = dir.File("lion.safetensors");
                saved.Step(data, 0, 20);
                saved.SaveCheckpoint(path);
                matching.LoadCheckpoint(path);
                Assert.Equal(1L, matching.Progress.Steps, "the checkpoint's step count");
                float loss = matching.Step(data, 0, 20);
                Assert.True(!float.IsNaN(loss) && !float.IsInfinity(loss), "a finite loss after resuming: " + loss);
                MptException error = Assert.Fails(Status.InvalidArgument, () => other.LoadCheckpoint(path));
                Assert.True(error.NativeMessage.Contains("beta2 0.95 (this trainer: 0.98)"), "the message: " + error.NativeMessage);
            }
        }

        [Test]
        public static void ACheckpointWrittenWithClassWeightsIsRefusedByATrainerWithoutThem()
        {
            var weightedOptions = new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f, ClassWeights = new[] { 1.0f, 2.0f, 3.0f } };
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Blobs(ctx, 60, 44))
            using (Model model = Mlp(ctx))
            using (var weighted = new Trainer(model, weightedOptions))
            using (var plain = new Trainer(model, Adam))
            using (var other = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f, ClassWeights = new[] { 1.0f, 2.0f, 4.0f } }))
            using (var matching = new Trainer(model, weightedOptions))
            {
                string path = dir.File("weighted.safetensors");
                weighted.Step(data, 0, 20);
                weighted.SaveCheckpoint(path);
                MptException error = Assert.Fails(Status.InvalidArgument, () => plain.LoadCheckpoint(path));
                Assert.True(error.NativeMessage.Contains("class_weights [1, 2, 3] (this trainer: none)"), "the message: " + error.NativeMessage);
                error = Assert.Fails(Status.InvalidArgument, () => other.LoadCheckpoint(path));
                Assert.True(error.NativeMessage.Contains("class_weights [1, 2, 3] (this trainer: [1, 2, 4])"), "the message: " + error.NativeMessage);
                matching.LoadCheckpoint(path);
                Assert.Equal(1L, matching.Progress.Steps, "the checkpoint's step count");
            }
        }

        [Test]
        public static void AutomaticCheckpointsKeepTheNewestAndCanBeTurnedOff()
        {
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Blobs(ctx, 200, 31))
            using (Model model = Mlp(ctx))
            using (var trainer = new Trainer(model, Adam))
            using (Model otherModel = Mlp(ctx))
            using (var other = new Trainer(otherModel, Adam))
            {
                trainer.SetCheckpointing(dir.Path, everySteps: 5, keepLast: 2);
                trainer.Fit(data, 3, 32); // 18 steps: checkpoints at 5, 10, 15
                Assert.SequenceEqual(new long[] { 10, 15 }, SavedSteps(dir.Path), "checkpoints kept");
                other.LoadCheckpoint(Directory.GetFiles(dir.Path).OrderBy(name => name, StringComparer.Ordinal).Last());
                Assert.Equal(15L, other.Progress.Steps, "steps of the newest checkpoint");

                trainer.SetCheckpointing(null);
                trainer.Fit(data, 1, 32);
                Assert.SequenceEqual(new long[] { 10, 15 }, SavedSteps(dir.Path), "no checkpoints when off");
                trainer.SetCheckpointing(dir.Path, everyEpochs: 1, keepLast: 5);
                trainer.Fit(data, 1, 32);
                Assert.SequenceEqual(new long[] { 10, 15, 30 }, SavedSteps(dir.Path), "a checkpoint per epoch");
                trainer.SetCheckpointing(dir.Path); // every epoch, keeping the newest
                trainer.Fit(data, 1, 32);
                Assert.SequenceEqual(new long[] { 36 }, SavedSteps(dir.Path), "the defaults");
            }
        }

        [Test]
        public static void MissingDamagedAndMismatchedFilesThrowWithTheirStatus()
        {
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Model model = Mlp(ctx))
            using (var trainer = new Trainer(model, Adam))
            using (Model narrow = new Model(ctx, Data.Features).AddDense(Data.Classes, Activation.Softmax))
            using (var narrowTrainer = new Trainer(narrow, Adam))
            using (var sgdTrainer = new Trainer(model))
            using (Dataset data = Blobs(ctx, 64, 41))
            {
                string missing = dir.File("missing.safetensors");
                Assert.Fails(Status.IoError, () => Model.Load(ctx, missing));
                Assert.Fails(Status.IoError, () => trainer.LoadCheckpoint(missing));

                string modelFile = dir.File("model.safetensors"), checkpoint = dir.File("checkpoint.safetensors");
                string truncated = dir.File("truncated.safetensors");
                model.Save(modelFile);
                trainer.SaveCheckpoint(checkpoint);
                Data.Truncate(modelFile, truncated);
                Assert.Fails(Status.CorruptData, () => Model.Load(ctx, truncated));
                Data.Truncate(checkpoint, truncated);
                Assert.Fails(Status.CorruptData, () => trainer.LoadCheckpoint(truncated));
                Assert.Fails(Status.CorruptData, () => Model.Load(ctx, truncated));

                Assert.Fails(Status.ShapeMismatch, () => narrowTrainer.LoadCheckpoint(checkpoint));
                Assert.Fails(Status.InvalidArgument, () => sgdTrainer.LoadCheckpoint(checkpoint));

                Assert.Fails(Status.IoError, () => model.Save(dir.File("no-such-directory/model.safetensors")));
                Assert.Fails(Status.InvalidArgument, () => model.Save("bad\0path"));
                Assert.Fails(Status.InvalidArgument, () => Model.Load(ctx, "bad\0path"));
                Assert.Throws<ArgumentNullException>(() => model.Save(null));
                Assert.Throws<ArgumentNullException>(() => Model.Load(ctx, null));
                Assert.Throws<ArgumentNullException>(() => Model.Load(null, modelFile));
                Assert.Throws<ArgumentNullException>(() => trainer.LoadCheckpoint(null));
                Assert.Fails(Status.InvalidArgument, () => trainer.SetCheckpointing(dir.Path, everySteps: 1, keepLast: 0));
                Assert.Fails(Status.InvalidArgument, () => trainer.SetCheckpointing(dir.Path, everySteps: 0, everyEpochs: 0)); // neither trigger

                // Refused when set, not at the first checkpoint.
                Assert.Fails(Status.IoError, () => trainer.SetCheckpointing(dir.File("no-such-directory"), everySteps: 1));
                string going = dir.File("going-away");
                System.IO.Directory.CreateDirectory(going);
                trainer.SetCheckpointing(going, everySteps: 1);
                System.IO.Directory.Delete(going);
                Assert.Fails(Status.IoError, () => trainer.Fit(data, 1, 32));
                // ...and everything still works afterwards.
                trainer.SetCheckpointing(null);
                trainer.Fit(data, 1, 32);
                trainer.LoadCheckpoint(checkpoint);
                Model.Load(ctx, modelFile).Dispose();

                model.Dispose();
                Assert.Throws<ObjectDisposedException>(() => model.Save(modelFile));
            }
        }

        [Test]
        public static void EveryPathTakingCallRefusesANul()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Mlp(ctx))
            using (var trainer = new Trainer(model))
            {
                // C would read only up to the NUL: another path than the one given.
                Assert.Fails(Status.InvalidArgument, () => Dataset.LoadCifar10(ctx, "/nonexistent\0/cifar-10-batches-bin", true));
                Assert.Fails(Status.InvalidArgument, () => model.Save("bad\0path"));
                Assert.Fails(Status.InvalidArgument, () => Model.Load(ctx, "bad\0path"));
                Assert.Fails(Status.InvalidArgument, () => trainer.SaveCheckpoint("bad\0path"));
                Assert.Fails(Status.InvalidArgument, () => trainer.LoadCheckpoint("bad\0path"));
                Assert.Fails(Status.InvalidArgument, () => trainer.SetCheckpointing("bad\0path", everySteps: 1));
            }
        }
    }
}
