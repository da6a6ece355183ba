// The small values a Trainer reports: Evaluate's loss and accuracy, and its loss scale, progress,
// unfinished epoch, memory and last epoch's time.
namespace Mptrain
{
    public struct Evaluation
    {
        public float Loss;
        public float Accuracy;
    }

    public struct LossScaleState
    {
        public float Scale;
        public long GrowthTracker;
        public long SkippedSteps;
    }

    public struct TrainingProgress
    {
        public long Steps;
        public long Epochs;
    }

    /// <summary>The epoch Fit left unfinished (Trainer.UnfinishedEpoch); all 0 when there is none.</summary>
    public struct UnfinishedEpoch
    {
        /// <summary>Its steps that ran.</summary>
        public long Steps;
        /// <summary>The rows of the data set it trains on.</summary>
        public long Rows;
        /// <summary>Its batch size.</summary>
        public long BatchSize;
    }

    public struct TrainerMemory
    {
        public ulong Planned;
        public ulong Allocated;
    }

    /// <summary>The last epoch Fit completed: device time on a GPU (CUDA events), host time on the CPU.</summary>
    public struct EpochTime
    {
        public double Seconds;
        public long Steps;
    }
}
