// Trains a small MLP on generated data (three blobs in 8 dimensions) and prints its accuracy.
//   mcs -r:Mptrain.dll examples/TrainMlp.cs && LD_LIBRARY_PATH=/path/to/build/lib mono TrainMlp.exe
using System;
using Mptrain;

public static class TrainMlp
{
    public static int Main()
    {
        const int features = 8, classes = 3, rows = 900;
        var random = new Random(2024);
        var samples = new float[rows * features];
        var labels = new int[rows];
        for (int row = 0; row < rows; row++)
        {
            labels[row] = row % classes;
            for (int f = 0; f < features; f++)
                samples[row * features + f] = (f % classes == labels[row] ? 2.0f : 0.0f) + (float)(random.NextDouble() - 0.5) * 1.5f;
        }

        Console.WriteLine("mptrain " + Library.Version);
        using (var context = new Context(new ContextOptions { Backend = Backend.Cpu, Seed = 7 }))
        using (var model = new Model(context, features).AddDense(32, Activation.Relu).AddDense(classes, Activation.Softmax))
        using (var data = Dataset.FromF32(context, samples, features, labels, classes))
        using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f }))
        {
            trainer.SetCallbacks(null, epoch => Console.WriteLine("epoch {0}: loss {1:F4} accuracy {2:F3}", epoch.Epoch, epoch.Loss, epoch.Accuracy));
            trainer.Fit(data, 5, 32);
            Evaluation result = trainer.Evaluate(data);
            Console.WriteLine("accuracy {0:F3} ({1} parameters)", result.Accuracy, model.ParameterCount);
            try
            {
                trainer.Predict(new float[features + 1]);
            }
            catch (MptException error)
            {
                Console.WriteLine("a wrong input length gives " + error.Status + ": " + error.NativeMessage);
            }
            return result.Accuracy > 0.9f ? 0 : 1;
        }
    }
}
