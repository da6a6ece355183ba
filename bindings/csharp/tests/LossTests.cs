// What the loss computes: label smoothing, mean absolute error and Huber, class weights, against double
// recomputations from the predictions or bit-identical equivalents; their bad options are refused.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Mptrain.Tests
{
    public static class LossTests
    {
        // The mean over rows of (1 - s) (-log p_label) + s mean_c(-log p_c), in double from the
        // probabilities: the cross-entropy towards the labels smoothed as mptrain.h defines it.
        static double SmoothedCrossEntropy(float[] probabilities, int[] labels, int rows, double s)
        {
            double total = 0;
            for (int row = 0; row < rows; row++)
            {
                double towardsUniform = 0;
                for (int c = 0; c < Data.Classes; c++) towardsUniform -= Math.Log(probabilities[row * Data.Classes + c]) / Data.Classes;
                total += (1 - s) * -Math.Log(probabilities[row * Data.Classes + labels[row]]) + s * towardsUniform;
            }
            return total / rows;
        }

        static TrainerOptions Smoothed(float? smoothing)
        {
            return new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam, LearningRate = 0.01f, LabelSmoothing = smoothing };
        }

        [Test]
        public static void LabelSmoothingMakesTheLossTheSmoothedCrossEntropyOfThePredictions()
        {
            float[] x; int[] y;
            Data.Blobs(90, 51, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var plain = new Trainer(model, Smoothed(null)))
            using (var smoothed = new Trainer(model, Smoothed(0.1f)))
            {
                float[] probabilities = plain.Predict(x);
                double towardsLabel = SmoothedCrossEntropy(probabilities, y, 90, 0.0);
                double expected = SmoothedCrossEntropy(probabilities, y, 90, 0.1f);
                Assert.True(Math.Abs(expected - towardsLabel) > 1e-3 * towardsLabel, "the two can be told apart");
                Evaluation without = plain.Evaluate(data), with = smoothed.Evaluate(data);
                Assert.Close(towardsLabel, without.Loss, "loss without smoothing");
                Assert.Close(expected, with.Loss, "loss with smoothing 0.1");
                Assert.Equal(without.Accuracy, with.Accuracy, "accuracy reads the given labels");
            }

            // Training follows the smoothed targets: a step's loss is its batch's smoothed one, and one
            // step from equal weights ends elsewhere than without smoothing.
            Func<float, float[]> stepFromStart = smoothing =>
            {
                using (Context ctx = Data.CpuContext(3))
                using (Model model = Data.Mlp(ctx))
                using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (var trainer = new Trainer(model, Smoothed(smoothing)))
                {
                    double batchExpected = SmoothedCrossEntropy(trainer.Predict(x.Take(30 * Data.Features).ToArray()), y, 30, smoothing);
                    Assert.Close(batchExpected, trainer.Step(data, 0, 30), "step loss with smoothing " + smoothing);
                    var weights = new List<float>();
                    for (int layer = 0; layer < model.LayerCount; layer++)
                    {
                        float[] w, b;
                        model.GetWeights(layer, out w, out b);
                        weights.AddRange(w.Concat(b));
                    }
                    return weights.ToArray();
                }
            };
            Assert.True(!stepFromStart(0.1f).SequenceEqual(stepFromStart(0.0f)), "smoothing changes the step's weights");
        }

        [Test]
        public static void LabelSmoothingOutsideZeroToOneOrWithMeanSquaredErrorIsRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                foreach (float refused in new[] { -0.01f, 1.0f, 1.5f, float.NaN, float.PositiveInfinity })
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, Smoothed(refused)).Dispose());
                    Assert.True(error.NativeMessage.Contains("label_smoothing"), "the message names the option: " + error.NativeMessage);
                }
                var regressions = new Dictionary<Loss, string> { { Loss.MeanSquaredError, "mean_squared_error" },
                                                                 { Loss.MeanAbsoluteError, "mean_absolute_error" }, { Loss.Huber, "huber" } };
                foreach (var loss in regressions)
                {
                    new Trainer(model, new TrainerOptions { Loss = loss.Key, LabelSmoothing = 0.0f }).Dispose(); // 0: none
                    MptException error = Assert.Fails(Status.InvalidArgument,
                        () => new Trainer(model, new TrainerOptions { Loss = loss.Key, LabelSmoothing = 0.1f }).Dispose());
                    Assert.True(error.NativeMessage.Contains(loss.Value + " has no labels"), "the message names the loss: " + error.NativeMessage);
                }
            }
        }

        const int LineRows = 100;

        // LineRows points x evenly in [-1, 1] on y = 2x + 1, every tenth target 20 above it.
        static void LineWithOutliers(out float[] xs, out float[] targets)
        {
            xs = new float[LineRows];
            targets = new float[LineRows];
            for (int row = 0; row < LineRows; row++)
            {
                xs[row] = -1.0f + 2.0f * row / (LineRows - 1);
                targets[row] = 2.0f * xs[row] + 1.0f + (row % 10 == 3 ? 20.0f : 0.0f);
            }
        }

        // One output's loss as mptrain.h defines it, in double: (y - t)^2, |y - t|, or Huber's
        // (y - t)^2 / 2 up to |y - t| = delta, then delta (|y - t| - delta / 2).
        static double RegressionTerm(Loss loss, double difference, double delta)
        {
            double size = Math.Abs(difference);
            if (loss == Loss.MeanSquaredError) return difference * difference;
            if (loss == Loss.MeanAbsoluteError) return size;
            return size <= delta ? 0.5 * difference * difference : delta * (size - 0.5 * delta);
        }

        sealed class LineFit
        {
            public float Slope, Intercept;
            public float Evaluated;  // Evaluate's loss
            public double Expected;  // the mean loss of the predictions, in double
            public override string ToString()
            {
                return "slope " + Slope + ", intercept " + Intercept + ", loss " + Evaluated + " (expected " + Expected + ")";
            }
        }

        // One input, one linear output fitted by fp32 Adam (rate 0.05, seed 5) to LineWithOutliers under
        // `loss` (and Huber's delta, when given).
        static LineFit FitLine(Loss loss, float? huberDelta = null)
        {
            float[] xs, targets;
            LineWithOutliers(out xs, out targets);
            using (Context ctx = Data.CpuContext(5))
            using (Model model = new Model(ctx, 1).AddDense(1, Activation.Linear))
            using (Dataset data = Dataset.FromTargets(ctx, xs, 1, targets, 1))
            using (var trainer = new Trainer(model, new TrainerOptions {
                Precision = Precision.Fp32, Loss = loss, HuberDelta = huberDelta, Optimizer = Optimizer.Adam, LearningRate = 0.05f }))
            {
                trainer.Fit(data, 200, 20);
                var fit = new LineFit { Evaluated = trainer.Evaluate(data).Loss };
                float[] weights, bias;
                model.GetWeights(0, out weights, out bias);
                fit.Slope = weights[0];
                fit.Intercept = bias[0];
                float[] predictions = model.Predict(xs);
                double delta = huberDelta ?? 1.0f;
                for (int row = 0; row < LineRows; row++)
                    fit.Expected += RegressionTerm(loss, (double)predictions[row] - targets[row], delta);
                fit.Expected /= LineRows;
                return fit;
            }
        }

        // The weights' bits after three fp32 SGD steps (rate 0.1, batches of 20, seed 5) of one linear
        // output on LineWithOutliers under Huber with this delta (null: the library's default).
        static int[] HuberSteps(float? delta)
        {
            float[] xs, targets;
            LineWithOutliers(out xs, out targets);
            using (Context ctx = Data.CpuContext(5)) // one seed: the same initial weights
            using (Model model = new Model(ctx, 1).AddDense(1, Activation.Linear))
            using (Dataset data = Dataset.FromTargets(ctx, xs, 1, targets, 1))
            using (var trainer = new Trainer(model, new TrainerOptions {
                Precision = Precision.Fp32, Loss = Loss.Huber, HuberDelta = delta, Optimizer = Optimizer.Sgd, LearningRate = 0.1f }))
            {
                int[] initial = Data.WeightBits(model);
                for (int step = 0; step < 3; step++) trainer.Step(data, 20 * step, 20);
                int[] trained = Data.WeightBits(model);
                Assert.True(!trained.SequenceEqual(initial), "the steps moved the weights");
                return trained;
            }
        }

        [Test]
        public static void MeanAbsoluteErrorAndHuberFitTheLineWhereMeanSquaredErrorIsPulledToTheOutliers()
        {
            LineFit squared = FitLine(Loss.MeanSquaredError);
            var robust = new Dictionary<Loss, LineFit> { { Loss.MeanAbsoluteError, FitLine(Loss.MeanAbsoluteError) },
                                                         { Loss.Huber, FitLine(Loss.Huber) } };
            // The loss each member stands for.
            Assert.Close(squared.Expected, squared.Evaluated, "MeanSquaredError's loss");
            foreach (var fit in robust) Assert.Close(fit.Value.Expected, fit.Value.Evaluated, fit.Key + "'s loss");
            // The least-squares intercept is 1 + 20 / 10 (the outliers' mean pull); the median's is 1, and
            // Huber's (delta 1) 1 + 10 / 90 (each outlier pulls with delta against 90 points on the line).
            Assert.True(squared.Intercept > 2.5f, "MeanSquaredError pulled to the outliers: " + squared);
            foreach (var fit in robust)
            {
                Assert.True(Math.Abs(fit.Value.Intercept - 1.0f) < 0.25f, fit.Key + " near the line's intercept: " + fit.Value);
                Assert.True(Math.Abs(fit.Value.Slope - 2.0f) < 0.1f, fit.Key + " near the line's slope: " + fit.Value);
                Assert.True(Math.Abs(fit.Value.Intercept - 1.0f) < Math.Abs(squared.Intercept - 1.0f),
                            fit.Key + " nearer the line than MeanSquaredError: " + fit.Value + " vs " + squared);
            }
        }

        [Test]
        public static void TheHuberDeltaChangesWhatHuberTrainsAndDefaultsTo1()
        {
            int[] delta1 = HuberSteps(1.0f);
            Assert.SequenceEqual(delta1, HuberSteps(null), "the library's default is 1");
            Assert.True(!HuberSteps(0.25f).SequenceEqual(delta1), "another delta, other weights");
            // A delta above every residual leaves Huber quadratic: pulled to the outliers as mean squared error.
            LineFit wide = FitLine(Loss.Huber, 100.0f);
            Assert.True(wide.Intercept > 2.5f, "Huber with delta 100 pulled to the outliers: " + wide);
        }

        [Test]
        public static void AHuberDeltaOf0NegativeNaNOrInfiniteIsRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                foreach (float refused in new[] { 0.0f, -0.0f, -1.0f, float.NaN, float.PositiveInfinity, float.NegativeInfinity })
                {
                    var options = new TrainerOptions { Loss = Loss.Huber, HuberDelta = refused };
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, options).Dispose());
                    Assert.True(error.NativeMessage.Contains("Huber delta"), "the message names the delta: " + error.NativeMessage);
                }
                new Trainer(model, new TrainerOptions { Loss = Loss.Huber, HuberDelta = 1e-3f }).Dispose(); // finite, above 0: accepted
            }
        }

        // The mean over rows of -sum_c t_c log p_c, each row's times weights[c], c its first largest
        // target (every weight 1 when weights is null), in double from the probabilities: class weights
        // as mptrain.h defines them. targets: rows * Classes floats.
        static double WeightedCrossEntropy(float[] probabilities, float[] targets, float[] weights)
        {
            int rows = targets.Length / Data.Classes;
            double total = 0;
            for (int row = 0; row < rows; row++)
            {
                double loss = 0;
                int firstLargest = 0;
                for (int c = 0; c < Data.Classes; c++)
                {
                    float t = targets[row * Data.Classes + c];
                    if (t != 0) loss -= t * Math.Log(probabilities[row * Data.Classes + c]);
                    if (t > targets[row * Data.Classes + firstLargest]) firstLargest = c;
                }
                total += (weights == null ? 1.0 : weights[firstLargest]) * loss;
            }
            return total / rows;
        }

        [Test]
        public static void ClassWeightsOfTwoTrainOneSgdStepAsTwiceTheLearningRateBitForBit()
        {
            float[] x; int[] y;
            Data.Blobs(30, 61, out x, out y);
            // Every weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling the rate.
            Func<float, float[], Tuple<float, int[]>> oneStep = (learningRate, classWeights) =>
            {
                using (Context ctx = Data.CpuContext(5))
                using (Model model = Data.Mlp(ctx))
                using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (var trainer = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Sgd,
                                                                             LearningRate = learningRate, Momentum = 0.0f, ClassWeights = classWeights }))
                {
                    int[] start = Data.WeightBits(model);
                    float loss = trainer.Step(data, 0, 30);
                    int[] weights = Data.WeightBits(model);
                    Assert.True(!weights.SequenceEqual(start), "the step moves the weights");
                    return Tuple.Create(loss, weights);
                }
            };
            Tuple<float, int[]> unweighted = oneStep(0.05f, null), doubledRate = oneStep(2 * 0.05f, null);
            Tuple<float, int[]> weighted = oneStep(0.05f, new[] { 2.0f, 2.0f, 2.0f });
            Assert.True(weighted.Item2.SequenceEqual(doubledRate.Item2), "weights 2 step as twice the rate, bit for bit");
            Assert.True(!weighted.Item2.SequenceEqual(unweighted.Item2), "weights 2 step elsewhere than the rate alone");
            Assert.Equal(unweighted.Item1, doubledRate.Item1, "the loss is that of the weights before the step");
            Assert.Equal(2 * unweighted.Item1, weighted.Item1, "the weighted loss is twice the unweighted one");
        }

        [Test]
        public static void ClassWeightsWeightStepsLossByEachRowsClassAndLeaveEvaluatesUnweighted()
        {
            var classWeights = new[] { 0.5f, 2.0f, 1.25f };
            float[] x; int[] y;
            Data.Blobs(30, 62, out x, out y);
            using (Context ctx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var weighted = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam,
                                                                          LearningRate = 0.01f, ClassWeights = classWeights }))
            using (var plain = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam, LearningRate = 0.01f }))
            {
                float[] probabilities = weighted.Predict(x);
                double unweightedLoss = WeightedCrossEntropy(probabilities, Data.OneHot(y), null);
                double expected = WeightedCrossEntropy(probabilities, Data.OneHot(y), classWeights);
                Assert.True(Math.Abs(expected - unweightedLoss) > 1e-3 * unweightedLoss, "the two can be told apart");
                Evaluation evaluation = weighted.Evaluate(data);
                Assert.Close(unweightedLoss, evaluation.Loss, "evaluate's loss (unweighted)");
                Assert.Equal(plain.Evaluate(data).Loss, evaluation.Loss, "evaluate's loss against a trainer's without weights");
                Assert.Close(expected, weighted.Step(data, 0, 30), "step's loss (weighted)");
            }

            // Float targets weigh a row by its first largest target: row 0 ties classes 1 and 2 (weight 2).
            float[] targets = Data.OneHot(y);
            targets[0] = 0.0f; targets[1] = 0.5f; targets[2] = 0.5f;
            targets[3] = 0.2f; targets[4] = 0.3f; targets[5] = 0.5f;
            using (Context ctx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromTargets(ctx, x, Data.Features, targets, Data.Classes))
            using (var categorical = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Loss = Loss.CategoricalCrossentropy,
                                                                             Optimizer = Optimizer.Adam, LearningRate = 0.01f, ClassWeights = classWeights }))
            {
                float[] probabilities = categorical.Predict(x);
                double expected = WeightedCrossEntropy(probabilities, targets, classWeights);
                var tieToTheLast = (float[])targets.Clone();  // row 0 weighed as class 2 (1.25) instead
                tieToTheLast[2] = 0.5000001f;
                Assert.True(Math.Abs(WeightedCrossEntropy(probabilities, tieToTheLast, classWeights) - expected) > 1e-4 * expected,
                            "the tie's two readings can be told apart");
                Assert.Close(expected, categorical.Step(data, 0, 30), "step's loss on float targets");
            }
        }

        [Test]
        public static void ClassWeightsRefusedByValueCountOrLoss()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                var refusals = new[] {
                    new[] { 1.0f, -0.5f, 1.0f }, new[] { 1.0f, float.NaN, 1.0f }, new[] { float.PositiveInfinity, 1.0f, 1.0f }, new[] { 0.0f, 0.0f, 0.0f } };
                foreach (float[] refused in refusals)
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, new TrainerOptions { ClassWeights = refused }).Dispose());
                    Assert.True(error.NativeMessage.Contains("class weights"), "the message names them: " + error.NativeMessage);
                }
                foreach (int count in new[] { 2, 4 })
                    Assert.Fails(Status.ShapeMismatch, () => new Trainer(model, new TrainerOptions { ClassWeights = Enumerable.Repeat(1.0f, count).ToArray() }).Dispose());
                new Trainer(model, new TrainerOptions { ClassWeights = new float[0] }).Dispose(); // empty: none
                new Trainer(model, new TrainerOptions { ClassWeights = new[] { 0.0f, 1.0f, 0.0f } }).Dispose(); // some zeros are fine
                foreach (Loss loss in new[] { Loss.BinaryCrossentropy, Loss.MeanSquaredError })
                {
                    new Trainer(model, new TrainerOptions { Loss = loss }).Dispose(); // accepted without class weights
                    Assert.Fails(Status.InvalidArgument,
                                 () => new Trainer(model, new TrainerOptions { Loss = loss, ClassWeights = new[] { 1.0f, 2.0f, 3.0f } }).Dispose());
                }
            }
        }
    }
}
