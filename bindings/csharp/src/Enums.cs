// The C API's enums, values pinned as in mptrain.h (the ABI test compares them with the header).
namespace Mptrain
{
    /// <summary>Result of a C call (values pinned forever, only appended).</summary>
    public enum Status : int
    {
        Ok = 0,
        InvalidArgument = 1,
        ShapeMismatch = 2,
        OutOfMemory = 3,
        IoError = 4,
        CorruptData = 5,
        InvalidState = 6,
        NonFinite = 7,
        Cancelled = 8,
        BackendUnavailable = 9,
        BackendError = 10,
        Unsupported = 11,
        Internal = 12,
    }

    public enum Backend : int { Auto = 0, Cpu = 1, Cuda = 2 }

    public enum DType : int { Default = 0, Fp32 = 1, Fp16 = 2, Bf16 = 3 }

    public enum Precision : int { Fp32 = 0, MixedFp16 = 1, MixedBf16 = 2, Auto = 3 }

    public enum Activation : int
    {
        Linear = 0, Relu = 1, Sigmoid = 2, Tanh = 3, Softmax = 4,
        LeakyRelu = 5, Elu = 6, Selu = 7, Softplus = 8, Softsign = 9
    }

    /// <summary>How a layer's weights are drawn when its model is built (Keras's kernel_initializer).</summary>
    public enum Initializer : int
    {
        GlorotUniform = 0, GlorotNormal = 1, HeUniform = 2, HeNormal = 3, LecunUniform = 4, LecunNormal = 5
    }

    /// <summary>The regression losses (float targets) average their term over the outputs, as Keras's:
    /// MeanSquaredError (y - t)^2, MeanAbsoluteError |y - t|, Huber with TrainerOptions.HuberDelta.</summary>
    public enum Loss : int
    {
        SparseCategoricalCrossentropy = 0,
        CategoricalCrossentropy = 1,
        BinaryCrossentropy = 2,
        MeanSquaredError = 3,
        MeanAbsoluteError = 4,
        Huber = 5,
    }

    /// <summary>Sgd takes momentum and Nesterov (TrainerOptions.Momentum, Nesterov); RmsProp, Keras's RMSprop
    /// (TrainerOptions.Rho), takes momentum but not Nesterov; Lion, Keras's Lion (TrainerOptions.LionBeta1,
    /// LionBeta2), ignores momentum as Adam does.</summary>
    public enum Optimizer : int { Sgd = 0, Adam = 1, AdamW = 2, RmsProp = 3, Lion = 4 }

    /// <summary>How a learning-rate schedule decays the rate after its warm-up (TrainerOptions.LrSchedule).</summary>
    public enum LrSchedule : int { Constant = 0, Linear = 1, Cosine = 2, Step = 3 }

    public enum LossScaling : int { Default = 0, Off = 1, Static = 2, Dynamic = 3 }

    public enum LogLevel : int { Debug = 0, Info = 1, Warning = 2, Error = 3 }
}
