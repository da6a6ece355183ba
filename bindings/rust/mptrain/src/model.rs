//! [`Model`]: a sequential stack of Dense layers, with its per-layer settings, input preprocessing,
//! weights, predictions and files.

use crate::c_arguments::{c_path, count, prediction_output, rows_of, zeroed_floats};
use crate::context::Context;
use crate::enums::{Activation, DType, Initializer};
use crate::error::{check, Error, Result, Status};
use crate::family::{Family, RawHandle};
use mptrain_sys as sys;
use std::os::raw::c_int;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Arc;

// Named only in doc links.
#[cfg(doc)]
use crate::{Dataset, Trainer};

/// A sequential stack of Dense layers.
pub struct Model {
    pub(crate) raw: NonNull<sys::mpt_model_t>,
    pub(crate) family: Arc<Family>,
    input_features: i64,
}

// SAFETY: as for Context.
unsafe impl Send for Model {}

impl Model {
    /// An empty model taking `input_features` floats per sample.
    pub fn new(context: &Context, input_features: i64) -> Result<Model> {
        let _lock = context.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_model_create(context.raw.as_ptr(), input_features, &mut raw) })?;
        Ok(Model {
            raw: NonNull::new(raw).expect("mpt_model_create returned NULL"),
            family: context.family.clone(),
            input_features,
        })
    }

    /// Appends a Dense layer; chainable: `model.add_dense(64, Relu)?.add_dense(10, Softmax)?`.
    pub fn add_dense(&mut self, units: i64, activation: Activation) -> Result<&mut Self> {
        {
            let _lock = self.family.enter()?;
            check(unsafe {
                sys::mpt_model_add_dense(self.raw.as_ptr(), units, activation.code())
            })?;
        }
        Ok(self)
    }

    /// Overrides one layer's compute dtype (before the model is built).
    pub fn set_layer_dtype(&mut self, layer: usize, dtype: DType) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_layer_dtype(self.raw.as_ptr(), layer as i64, dtype.code())
        })
    }

    /// Layer `layer`'s dtype override ([`DType::Default`]: the policy's).
    pub fn layer_dtype(&self, layer: usize) -> Result<DType> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_dtype(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        DType::returned(out)
    }

    /// Dropout after hidden layer `layer`, as a Keras `Dropout(rate)` layer after it: while a trainer
    /// trains (fit, step), each of its outputs is dropped with probability `rate` in [0, 1) and the
    /// kept ones are scaled by `1 / (1 - rate)`; evaluate and predict use every output. 0 (the
    /// default) means none. Before the model is built; another rate or layer fails with
    /// [`Status::InvalidArgument`]. Building a model whose last layer has dropout ([`Trainer::new`],
    /// predict, weights) fails with [`Status::InvalidState`]. Saved with the model.
    pub fn set_layer_dropout(&mut self, layer: usize, rate: f32) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_model_set_layer_dropout(self.raw.as_ptr(), layer as i64, rate) })
    }

    /// Dropout on the inputs, as a Keras `Dropout(rate)` before the first Dense layer: while a
    /// trainer trains, each input value is dropped with probability `rate` in [0, 1) and the kept
    /// ones are scaled by `1 / (1 - rate)`; evaluate and predict use every input. Before the model
    /// is built; saved with the model.
    pub fn set_input_dropout(&mut self, rate: f32) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_model_set_input_dropout(self.raw.as_ptr(), rate) })
    }

    /// The inputs' dropout rate (0: none).
    pub fn input_dropout(&self) -> Result<f32> {
        let _lock = self.family.enter()?;
        let mut out = 0.0;
        check(unsafe { sys::mpt_model_get_input_dropout(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Standardizes the inputs inside the model, as a Keras `Normalization` layer before the first
    /// Dense layer: input feature `f` becomes `(x - mean[f]) / max(stddev[f], 1e-7)`, each operation
    /// rounded in `f32`, in [`Trainer::fit`], [`Trainer::step`], [`Trainer::evaluate`] and
    /// [`Trainer::predict_dataset`] and in [`Model::predict`] and [`Trainer::predict`] alike. Saved
    /// with the model, so a loaded model predicts from raw inputs as the trained one did. A training
    /// set's [`Dataset::feature_statistics`] are the values to give (Keras's `adapt`):
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset, Model};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// # let mut model = Model::new(&ctx, 4)?;
    /// let training = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// let (mean, stddev) = training.feature_statistics()?;
    /// model.set_input_standardization(&mean, &stddev)?; // then fit on the raw training set
    /// # Ok(()) }
    /// ```
    ///
    /// `mean` and `stddev` hold one value per input feature: another count (or lengths that differ)
    /// fails with [`Status::ShapeMismatch`], a non-finite mean or a negative or non-finite standard
    /// deviation with [`Status::InvalidArgument`] naming the first such. They are copied and replace
    /// any the model had. A trainer refuses a [`Dataset::standardized`] dataset for such a model
    /// ([`Status::InvalidArgument`]: that would standardize twice). At any time but while a trainer
    /// fits the model ([`Status::InvalidState`]).
    pub fn set_input_standardization(&mut self, mean: &[f32], stddev: &[f32]) -> Result<()> {
        // One count reaches C: slices of different lengths are the shape mismatch it reports for a
        // count other than the input features. (Empty slices point somewhere, not NULL: C sees a
        // count of 0, not a removal.)
        if mean.len() != stddev.len() {
            return Err(Error::new(
                Status::ShapeMismatch,
                format!(
                    "standardization takes one mean and one stddev per input feature ({} means and {} \
                     stddevs given)",
                    mean.len(),
                    stddev.len()
                ),
            ));
        }
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_input_standardization(
                self.raw.as_ptr(),
                mean.as_ptr(),
                stddev.as_ptr(),
                count(mean.len()),
            )
        })
    }

    /// Removes the model's input standardization, if any: it takes its inputs as given again.
    pub fn clear_input_standardization(&mut self) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_input_standardization(self.raw.as_ptr(), ptr::null(), ptr::null(), 0)
        })
    }

    /// The `(mean, stddev)` the model standardizes its inputs by, as set (not floored), as
    /// [`Dataset::feature_statistics`] gives them; `None` when it takes its inputs as given.
    pub fn input_standardization(&self) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
        let _lock = self.family.enter()?;
        let mut mean = zeroed_floats(self.input_features)?;
        let mut stddev = zeroed_floats(self.input_features)?;
        let mut standardizes: c_int = 0;
        check(unsafe {
            sys::mpt_model_get_input_standardization(
                self.raw.as_ptr(),
                mean.as_mut_ptr(),
                stddev.as_mut_ptr(),
                self.input_features,
                &mut standardizes,
            )
        })?;
        Ok((standardizes != 0).then_some((mean, stddev)))
    }

    /// How layer `layer`'s weights are drawn when the model is built (default
    /// [`Initializer::GlorotUniform`]), from the context's seed. Before the model is built (else
    /// [`Status::InvalidState`]); not saved with the model, whose file holds the weights.
    pub fn set_layer_initializer(&mut self, layer: usize, initializer: Initializer) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_layer_initializer(
                self.raw.as_ptr(),
                layer as i64,
                initializer as c_int,
            )
        })
    }

    /// Layer `layer`'s initializer (a loaded model's are the default: its file holds weights).
    pub fn layer_initializer(&self, layer: usize) -> Result<Initializer> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_initializer(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Initializer::returned(out)
    }

    /// Freezes layer `layer` (`false`) or lets it train (`true`, the default), as Keras's
    /// `layer.trainable`: trainers' steps leave a frozen layer's weights, bias and optimizer state
    /// exactly as they are (no gradient, no weight decay, no share of the clipped norm, no
    /// averaging: swapped in, the averages leave it as it is), while gradients still flow through it to the layers
    /// below. At any time: every trainer's next step reads it. Training with every layer frozen
    /// fails with [`Status::InvalidState`]. Saved with the model.
    pub fn set_layer_trainable(&mut self, layer: usize, trainable: bool) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_layer_trainable(
                self.raw.as_ptr(),
                layer as i64,
                c_int::from(trainable),
            )
        })
    }

    /// Whether layer `layer` trains (`false`: frozen).
    pub fn layer_trainable(&self, layer: usize) -> Result<bool> {
        let _lock = self.family.enter()?;
        let mut out: c_int = 0;
        check(unsafe {
            sys::mpt_model_get_layer_trainable(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Ok(out != 0)
    }

    /// Layer `layer`'s dropout rate (0: none).
    pub fn layer_dropout(&self, layer: usize) -> Result<f32> {
        let _lock = self.family.enter()?;
        let mut out = 0.0;
        check(unsafe {
            sys::mpt_model_get_layer_dropout(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Ok(out)
    }

    fn query(
        &self,
        getter: unsafe extern "C" fn(*const sys::mpt_model_t, *mut i64) -> c_int,
    ) -> Result<i64> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe { getter(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }
    /// Number of layers.
    pub fn layer_count(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_layer_count)
    }
    /// Floats per input sample.
    pub fn input_features(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_input_features)
    }
    /// Width of the last layer.
    pub fn output_features(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_output_features)
    }
    /// Trainable parameters (weights and biases).
    pub fn parameter_count(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_parameter_count)
    }

    fn layer_shape(&self, layer: usize) -> Result<(i64, i64)> {
        let units = self.layer_units(layer)?; // fails for a layer out of range
        let inputs = if layer == 0 {
            self.input_features
        } else {
            self.layer_units(layer - 1)?
        };
        Ok((units, inputs))
    }

    /// Layer `layer`'s width, as added or as a loaded file holds it.
    pub fn layer_units(&self, layer: usize) -> Result<i64> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_units(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Ok(out)
    }

    /// Layer `layer`'s activation, as added or as a loaded file holds it.
    pub fn layer_activation(&self, layer: usize) -> Result<Activation> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_activation(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Activation::returned(out)
    }

    /// A layer's fp32 master weights (row-major `[units, inputs]`) and bias (`[units]`).
    pub fn weights(&mut self, layer: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let (units, inputs) = self.layer_shape(layer)?;
        // The library caps both at 2^24, so no overflow, but 2^48 floats fit no memory.
        let mut weights = zeroed_floats(units.saturating_mul(inputs))?;
        let mut bias = zeroed_floats(units)?;
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_get_weights(
                self.raw.as_ptr(),
                layer as i64,
                weights.as_mut_ptr(),
                count(weights.len()),
                bias.as_mut_ptr(),
                count(bias.len()),
            )
        })?;
        Ok((weights, bias))
    }

    /// Sets a layer's weights and bias (same layout as [`Model::weights`]); the lengths must match.
    pub fn set_weights(&mut self, layer: usize, weights: &[f32], bias: &[f32]) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_weights(
                self.raw.as_ptr(),
                layer as i64,
                weights.as_ptr(),
                count(weights.len()),
                bias.as_ptr(),
                count(bias.len()),
            )
        })
    }

    /// fp32 forward pass for whole rows of `input_features` floats; returns `rows * output_features`
    /// values, row-major.
    pub fn predict(&mut self, inputs: &[f32]) -> Result<Vec<f32>> {
        let rows = rows_of(inputs.len(), self.input_features, "inputs")?;
        let mut out = prediction_output(rows, self.input_features, self.output_features()?)?;
        self.predict_into(inputs, &mut out)?;
        Ok(out)
    }

    /// As [`Model::predict`], into a caller's buffer of exactly `rows * output_features` floats.
    pub fn predict_into(&mut self, inputs: &[f32], out: &mut [f32]) -> Result<()> {
        let rows = rows_of(inputs.len(), self.input_features, "inputs")?;
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_predict(
                self.raw.as_ptr(),
                inputs.as_ptr(),
                rows,
                out.as_mut_ptr(),
                count(out.len()),
            )
        })
    }

    /// Saves the architecture and fp32 weights as a .safetensors file (atomically: a crash leaves the
    /// old file or the new one). Builds the model. [`Status::IoError`] when it cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_model_save(self.raw.as_ptr(), path.as_ptr()) })
    }

    /// Loads a model written by [`Model::save`] (or the model inside a training checkpoint). A missing
    /// file fails with [`Status::IoError`], a truncated or damaged one with [`Status::CorruptData`], one
    /// from another major version with [`Status::Unsupported`].
    pub fn load(context: &Context, path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let c_path = c_path(path)?;
        let _lock = context.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_model_load(context.raw.as_ptr(), c_path.as_ptr(), &mut raw) })?;
        let mut model = Model {
            raw: NonNull::new(raw).expect("mpt_model_load returned NULL"),
            family: context.family.clone(),
            input_features: 0,
        };
        model.input_features = model.input_features()?;
        Ok(model)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.family.destroy(RawHandle::Model(self.raw));
    }
}
