// P/Invoke declarations of the C API (include/mptrain/mptrain.h), one per function, same names.
// Handles travel as the SafeHandle subclasses of Handles.cs; _destroy functions take IntPtr because
// only ReleaseHandle calls them. C int64_t is long, size_t is UIntPtr, enums are int-sized.
using System;
using System.Runtime.InteropServices;

namespace Mptrain
{
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void LogFn(int level, IntPtr message, IntPtr userData);

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate int ProgressFn(long epoch, long step, long stepsPerEpoch, float loss, float accuracy, IntPtr userData);

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate int EpochEndFn(long epoch, float loss, float accuracy, IntPtr userData);

    internal static class Native
    {
        internal const string Library = "mptrain";
        private const CallingConvention Cdecl = CallingConvention.Cdecl;

        // Version, status, errors
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern IntPtr mpt_version();
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern IntPtr mpt_status_string(Status status);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern IntPtr mpt_last_error();
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern int mpt_cuda_device_count();

        // Context
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_create(out ContextOptionsHandle options);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern void mpt_context_options_destroy(IntPtr options);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_backend(ContextOptionsHandle options, Backend backend);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_threads(ContextOptionsHandle options, int threads);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_seed(ContextOptionsHandle options, ulong seed);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_device(ContextOptionsHandle options, int device);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_log_callback(ContextOptionsHandle options, LogFn callback, IntPtr userData);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_log_level(ContextOptionsHandle options, LogLevel level);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_memory_budget(ContextOptionsHandle options, UIntPtr bytes);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_options_set_dataset_device_budget(ContextOptionsHandle options, UIntPtr bytes);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_create(ContextOptionsHandle options, out ContextHandle context);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern void mpt_context_destroy(IntPtr context);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_get_backend(ContextHandle context, out Backend backend);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_resolve_precision(ContextHandle context, Precision requested, out Precision precision);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_get_memory(ContextHandle context, out UIntPtr usedBytes, out UIntPtr peakBytes);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_context_describe(ContextHandle context, [Out] byte[] text, UIntPtr capacity, out UIntPtr length);

        // Model
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_create(ContextHandle context, long inputFeatures, out ModelHandle model);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern void mpt_model_destroy(IntPtr model);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_add_dense(ModelHandle model, long units, Activation activation);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_set_layer_dtype(ModelHandle model, long layer, DType dtype);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_set_layer_dropout(ModelHandle model, long layer, float rate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_layer_dropout(ModelHandle model, long layer, out float rate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_set_layer_trainable(ModelHandle model, long layer, int trainable);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_layer_trainable(ModelHandle model, long layer, out int trainable);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_layer_dtype(ModelHandle model, long layer, out DType dtype);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_layer_units(ModelHandle model, long layer, out long units);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_layer_activation(ModelHandle model, long layer, out Activation activation);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_set_input_dropout(ModelHandle model, float rate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_input_dropout(ModelHandle model, out float rate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_set_input_standardization(ModelHandle model, [In] float[] mean, [In] float[] stddev, long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_input_standardization(ModelHandle model, [Out] float[] mean, [Out] float[] stddev, long count, out int standardizes);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_set_layer_initializer(ModelHandle model, long layer, Initializer initializer);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_layer_initializer(ModelHandle model, long layer, out Initializer initializer);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_layer_count(ModelHandle model, out long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_input_features(ModelHandle model, out long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_output_features(ModelHandle model, out long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_parameter_count(ModelHandle model, out long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_get_weights(ModelHandle model, long layer, [Out] float[] weights, long weightCount, [Out] float[] bias, long biasCount);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_set_weights(ModelHandle model, long layer, [In] float[] weights, long weightCount, [In] float[] bias, long biasCount);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_predict(ModelHandle model, [In] float[] inputs, long rows, [Out] float[] output, long outCount);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_save(ModelHandle model, IntPtr pathUtf8);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_model_load(ContextHandle context, IntPtr pathUtf8, out ModelHandle model);

        // Dataset
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_create_u8(ContextHandle context, [In] byte[] samples, long rows, long features, [In] int[] labels, int numClasses, float scale, float offset, out DatasetHandle dataset);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_create_f32(ContextHandle context, [In] float[] samples, long rows, long features, [In] int[] labels, int numClasses, int checkFinite, out DatasetHandle dataset);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_create_f32_targets(ContextHandle context, [In] float[] samples, long rows, long features, [In] float[] targets, long targetWidth, int checkFinite, out DatasetHandle dataset);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_load_cifar10(ContextHandle context, IntPtr directoryUtf8, int train, long limit, out DatasetHandle dataset);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern void mpt_dataset_destroy(IntPtr dataset);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_get_rows(DatasetHandle dataset, out long rows);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_get_features(DatasetHandle dataset, out long features);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_get_labels(DatasetHandle dataset, [Out] int[] labels, long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_create_slice(DatasetHandle dataset, long first, long rows, out DatasetHandle slice);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_create_weighted(DatasetHandle dataset, [In] float[] weights, long count, out DatasetHandle weighted);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_create_subset(DatasetHandle dataset, [In] long[] rows, long count, out DatasetHandle subset);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_create_standardized(DatasetHandle dataset, [In] float[] mean, [In] float[] stddev, long count, out DatasetHandle standardized);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_dataset_get_feature_statistics(DatasetHandle dataset, [Out] float[] mean, [Out] float[] stddev, long count);

        // Trainer options
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_create(out TrainerOptionsHandle options);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern void mpt_trainer_options_destroy(IntPtr options);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_precision(TrainerOptionsHandle options, Precision precision);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_loss(TrainerOptionsHandle options, Loss loss);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_huber_delta(TrainerOptionsHandle options, float delta);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_label_smoothing(TrainerOptionsHandle options, float labelSmoothing);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_class_weights(TrainerOptionsHandle options, [In] float[] weights, long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_optimizer(TrainerOptionsHandle options, Optimizer optimizer);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_learning_rate(TrainerOptionsHandle options, float learningRate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_momentum(TrainerOptionsHandle options, float momentum, int nesterov);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_adam(TrainerOptionsHandle options, float beta1, float beta2, float epsilon);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_rmsprop(TrainerOptionsHandle options, float rho, float epsilon);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_rmsprop_centered(TrainerOptionsHandle options, int centered);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_lion(TrainerOptionsHandle options, float beta1, float beta2);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_weight_decay(TrainerOptionsHandle options, float weightDecay);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_global_clipnorm(TrainerOptionsHandle options, float clipnorm);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_ema(TrainerOptionsHandle options, float momentum);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_micro_batch_size(TrainerOptionsHandle options, long rows);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_lr_schedule(TrainerOptionsHandle options, LrSchedule schedule, long warmupSteps, long decaySteps, float factor);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_loss_scaling(TrainerOptionsHandle options, LossScaling mode, float initialScale);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_set_loss_scaler_dynamics(TrainerOptionsHandle options, float growthFactor, float backoffFactor, long growthInterval, float minScale, float maxScale);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_precision(TrainerOptionsHandle options, out Precision precision);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_loss(TrainerOptionsHandle options, out Loss loss);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_huber_delta(TrainerOptionsHandle options, out float delta);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_label_smoothing(TrainerOptionsHandle options, out float labelSmoothing);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_class_weights(TrainerOptionsHandle options, [Out] float[] weights, long capacity, out long count);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_optimizer(TrainerOptionsHandle options, out Optimizer optimizer);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_learning_rate(TrainerOptionsHandle options, out float learningRate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_momentum(TrainerOptionsHandle options, out float momentum, out int nesterov);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_adam(TrainerOptionsHandle options, out float beta1, out float beta2, out float epsilon);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_lion(TrainerOptionsHandle options, out float beta1, out float beta2);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_rmsprop(TrainerOptionsHandle options, out float rho, out float epsilon);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_rmsprop_centered(TrainerOptionsHandle options, out int centered);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_weight_decay(TrainerOptionsHandle options, out float weightDecay);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_global_clipnorm(TrainerOptionsHandle options, out float clipnorm);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_ema(TrainerOptionsHandle options, out float momentum);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_micro_batch_size(TrainerOptionsHandle options, out long rows);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_lr_schedule(TrainerOptionsHandle options, out LrSchedule schedule, out long warmupSteps, out long decaySteps, out float factor);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_loss_scaling(TrainerOptionsHandle options, out LossScaling mode, out float initialScale);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_get_loss_scaler_dynamics(TrainerOptionsHandle options, out float growthFactor, out float backoffFactor, out long growthInterval, out float minScale, out float maxScale);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_options_create_from_checkpoint(IntPtr pathUtf8, out TrainerOptionsHandle options);

        // Trainer
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_create(ModelHandle model, TrainerOptionsHandle options, out TrainerHandle trainer);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern void mpt_trainer_destroy(IntPtr trainer);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_set_callbacks(TrainerHandle trainer, ProgressFn progress, EpochEndFn epochEnd, IntPtr userData);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_fit(TrainerHandle trainer, DatasetHandle dataset, long epochs, long batchSize, int shuffle);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_step(TrainerHandle trainer, DatasetHandle dataset, long first, long batchSize, out float loss);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_evaluate(TrainerHandle trainer, DatasetHandle dataset, long batchSize, out float loss, out float accuracy);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_predict(TrainerHandle trainer, [In] float[] inputs, long rows, [Out] float[] output, long outCount);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_predict_dataset(TrainerHandle trainer, DatasetHandle dataset, long batchSize, [Out] float[] output, long outCount);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_precision(TrainerHandle trainer, out Precision precision);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_set_learning_rate(TrainerHandle trainer, float learningRate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_learning_rate(TrainerHandle trainer, out float learningRate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_options(TrainerHandle trainer, out TrainerOptionsHandle options);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_scheduled_learning_rate(TrainerHandle trainer, out float learningRate);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_loss_scale(TrainerHandle trainer, out float scale, out long growthTracker, out long skippedSteps);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_gradient_norm(TrainerHandle trainer, out float norm);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_swap_ema_weights(TrainerHandle trainer, out int holdsAverages);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_progress(TrainerHandle trainer, out long steps, out long epochs);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_batch_size(TrainerHandle trainer, out long rows);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_unfinished_epoch(TrainerHandle trainer, out long steps, out long rows, out long batchSize);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_save_checkpoint(TrainerHandle trainer, IntPtr pathUtf8);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_load_checkpoint(TrainerHandle trainer, IntPtr pathUtf8);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_set_checkpointing(TrainerHandle trainer, IntPtr directoryUtf8, long everySteps, long everyEpochs, long keepLast);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_memory(TrainerHandle trainer, out UIntPtr plannedBytes, out UIntPtr allocatedBytes);
        [DllImport(Library, CallingConvention = Cdecl)] internal static extern Status mpt_trainer_get_last_epoch_time(TrainerHandle trainer, out double seconds, out long steps);
    }
}
