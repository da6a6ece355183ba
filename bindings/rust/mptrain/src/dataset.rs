//! [`Dataset`]: training data copied into the library, and the datasets made from one (slices,
//! subsets, weighted and standardized ones).

use crate::c_arguments::{c_path, count, host_elements, rows_of, zeroed, zeroed_floats};
use crate::context::Context;
use crate::error::{check, Error, Result, Status};
use crate::family::{Family, RawHandle};
use mptrain_sys as sys;
use std::os::raw::c_int;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Arc;

// Named only in doc links.
#[cfg(doc)]
use crate::{Model, Trainer, TrainerOptions};

/// Training data, copied into the library (the caller's slices are not retained); [`Dataset::slice`]
/// makes a dataset of some of its rows without a copy, [`Dataset::subset`] one of copies of any of
/// its rows, [`Dataset::weighted`] one of its rows with a weight per row, [`Dataset::standardized`]
/// one of its rows standardized feature by feature; [`Dataset::labels`] copies its labels back out,
/// [`Dataset::feature_statistics`] each feature's mean and standard deviation.
pub struct Dataset {
    pub(crate) raw: NonNull<sys::mpt_dataset_t>,
    pub(crate) family: Arc<Family>,
}

// SAFETY: as for Context.
unsafe impl Send for Dataset {}

impl Dataset {
    fn check_samples(samples: usize, features: i64, rows: usize) -> Result<()> {
        // Beyond the library's limit (i64 overflow included) no slice can be right: that is the
        // library's refusal, with its status and message.
        let expected = if features > 0 && rows > 0 {
            Some(host_elements(
                rows as i64,
                features,
                "the dataset (rows * features)",
            )?)
        } else {
            None
        };
        if expected != Some(samples as i64) {
            return Err(Error::new(
                Status::ShapeMismatch,
                format!("{samples} sample values do not make {rows} rows of {features} features"),
            ));
        }
        Ok(())
    }

    fn create(
        context: &Context,
        make: impl FnOnce(*mut sys::mpt_context_t, *mut *mut sys::mpt_dataset_t) -> c_int,
    ) -> Result<Dataset> {
        let _lock = context.family.enter()?;
        let mut raw = ptr::null_mut();
        check(make(context.raw.as_ptr(), &mut raw))?;
        Ok(Dataset {
            raw: NonNull::new(raw).expect("dataset creation returned NULL"),
            family: context.family.clone(),
        })
    }

    /// A dataset made from this one (a slice, subset, weighted or standardized one), of its family.
    fn derive(
        &self,
        make: impl FnOnce(*mut sys::mpt_dataset_t, *mut *mut sys::mpt_dataset_t) -> c_int,
    ) -> Result<Dataset> {
        let _lock = self.family.enter()?;
        let mut raw = ptr::null_mut();
        check(make(self.raw.as_ptr(), &mut raw))?;
        Ok(Dataset {
            raw: NonNull::new(raw).expect("derived dataset creation returned NULL"),
            family: self.family.clone(),
        })
    }

    /// float32 samples (`labels.len()` rows of `features`) with labels in `[0, num_classes)`.
    pub fn from_f32(
        context: &Context,
        samples: &[f32],
        features: i64,
        labels: &[i32],
        num_classes: i32,
        check_finite: bool,
    ) -> Result<Dataset> {
        Self::check_samples(samples.len(), features, labels.len())?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_create_f32(
                ctx,
                samples.as_ptr(),
                count(labels.len()),
                features,
                labels.as_ptr(),
                num_classes,
                check_finite as c_int,
                out,
            )
        })
    }

    /// uint8 samples, normalised as `x * scale + offset` when batched (CIFAR: 1/255, 0).
    pub fn from_u8(
        context: &Context,
        samples: &[u8],
        features: i64,
        labels: &[i32],
        num_classes: i32,
        scale: f32,
        offset: f32,
    ) -> Result<Dataset> {
        Self::check_samples(samples.len(), features, labels.len())?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_create_u8(
                ctx,
                samples.as_ptr(),
                count(labels.len()),
                features,
                labels.as_ptr(),
                num_classes,
                scale,
                offset,
                out,
            )
        })
    }

    /// float32 samples with float32 targets (`[rows, target_width]`) for one-hot categorical, binary
    /// cross-entropy or the regression losses.
    pub fn from_f32_targets(
        context: &Context,
        samples: &[f32],
        features: i64,
        targets: &[f32],
        target_width: i64,
        check_finite: bool,
    ) -> Result<Dataset> {
        let rows = rows_of(targets.len(), target_width, "targets")?;
        Self::check_samples(samples.len(), features, rows as usize)?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_create_f32_targets(
                ctx,
                samples.as_ptr(),
                rows,
                features,
                targets.as_ptr(),
                target_width,
                check_finite as c_int,
                out,
            )
        })
    }

    /// CIFAR-10 from the binary release's directory; `limit` > 0 keeps the first `limit` records.
    pub fn load_cifar10(
        context: &Context,
        directory: impl AsRef<Path>,
        train: bool,
        limit: i64,
    ) -> Result<Dataset> {
        let path = c_path(directory.as_ref())?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_load_cifar10(ctx, path.as_ptr(), train as c_int, limit, out)
        })
    }

    fn query(
        &self,
        getter: unsafe extern "C" fn(*const sys::mpt_dataset_t, *mut i64) -> c_int,
    ) -> Result<i64> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe { getter(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }
    /// Number of samples.
    pub fn rows(&self) -> Result<i64> {
        self.query(sys::mpt_dataset_get_rows)
    }
    /// Values per sample.
    pub fn features(&self) -> Result<i64> {
        self.query(sys::mpt_dataset_get_features)
    }

    /// The integer labels, one per row (a slice's own rows', from its first): with
    /// [`Trainer::predict_dataset`], a confusion matrix or the per-class accuracy of a loaded data set
    /// (the CIFAR-10 test set, a validation slice):
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset, Model, Trainer};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let model = Model::new(&ctx, 3072)?;
    /// # let mut trainer = Trainer::with_defaults(&model)?;
    /// let test = Dataset::load_cifar10(&ctx, "cifar-10-batches-bin", false, 0)?;
    /// let probabilities = trainer.predict_dataset(&test, 0)?; // rows * 10
    /// let mut confusion = [[0u32; 10]; 10]; // [label][predicted class]
    /// for (label, row) in test.labels()?.into_iter().zip(probabilities.chunks(10)) {
    ///     let predicted = (0..10).fold(0, |best, c| if row[c] > row[best] { c } else { best });
    ///     confusion[label as usize][predicted] += 1;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// A dataset of float targets ([`Dataset::from_f32_targets`]) has no labels: that fails with
    /// [`Status::InvalidArgument`].
    pub fn labels(&self) -> Result<Vec<i32>> {
        let _lock = self.family.enter()?;
        let mut rows = 0i64;
        check(unsafe { sys::mpt_dataset_get_rows(self.raw.as_ptr(), &mut rows) })?;
        let mut out = zeroed::<i32>(rows)?;
        check(unsafe {
            sys::mpt_dataset_get_labels(self.raw.as_ptr(), out.as_mut_ptr(), count(out.len()))
        })?;
        Ok(out)
    }

    /// A dataset of rows `[first, first + rows)` of this one that shares its storage: nothing is
    /// copied, and on a GPU one device copy serves this dataset and all its slices (placed when any of
    /// them is first used, within the context's dataset device budget as a whole). Labels or targets,
    /// classes and normalisation are this dataset's. For a held-out validation set or a first or last
    /// fold; Keras's `validation_split` holds out the last rows, before any shuffling:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// let rows = data.rows()?;
    /// let held_out = rows - rows * 4 / 5; // validation_split = 0.2: Keras trains on floor(0.8 rows)
    /// let training = data.slice(0, rows - held_out)?;
    /// let validation = data.slice(rows - held_out, held_out)?;
    /// drop(data); // the slices keep the rows
    /// # Ok(()) }
    /// ```
    ///
    /// The slice keeps the storage alive after this `Dataset` is dropped; a slice of a slice counts
    /// from that slice's first row. `first` outside `[0, rows)` or `rows` outside
    /// `[1, rows - first]` fails with [`Status::InvalidArgument`].
    pub fn slice(&self, first: i64, rows: i64) -> Result<Dataset> {
        self.derive(|source, out| unsafe {
            sys::mpt_dataset_create_slice(source, first, rows, out)
        })
    }

    /// A dataset of copies of this one's rows `rows[0]`, `rows[1]`, ... in that order: any rows,
    /// where a slice is one range. For k-fold cross-validation (a fold's training rows are all the
    /// others), a stratified or shuffled split, or a bootstrap sample (a row may be listed more than
    /// once). Each row brings its label or targets and its weight (of a [`Dataset::weighted`]
    /// dataset); classes and normalisation are this dataset's:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// // The third of five folds (rows 40..60) held out; the rows around it train.
    /// let training_rows: Vec<i64> = (0..40).chain(60..100).collect();
    /// let training = data.subset(&training_rows)?;
    /// let validation = data.slice(40, 20)?;
    /// # Ok(()) }
    /// ```
    ///
    /// Unlike a slice the rows are copied, into a storage of the subset's own (on a GPU placed on
    /// the device apart from this dataset's when first used). Indices count from this dataset's first
    /// row (a slice's own); no rows, or an index outside `[0, rows)`, fails with
    /// [`Status::InvalidArgument`] naming the first such.
    pub fn subset(&self, rows: &[i64]) -> Result<Dataset> {
        self.derive(|source, out| unsafe {
            sys::mpt_dataset_create_subset(source, rows.as_ptr(), count(rows.len()), out)
        })
    }

    /// A dataset of this one's rows with a weight per row: Keras's `sample_weight`, for fit and
    /// evaluate alike. In [`Trainer::fit`], [`Trainer::step`] and [`Trainer::evaluate`] each row's
    /// loss (and in training its gradient) is multiplied by its weight, and in training by its class
    /// weight too where the trainer has [`TrainerOptions::class_weights`] (evaluate leaves those out,
    /// as without row weights), then averaged over the rows as before: the weights are not
    /// normalised (Keras's `sum_over_batch_size`), so the losses reported, evaluate's included, are
    /// the weighted ones. Accuracy counts every row once. Every loss takes row weights:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// // Rows of label 0 count twice as much as the others.
    /// let weights: Vec<f32> = labels.iter().map(|&l| if l == 0 { 2.0 } else { 1.0 }).collect();
    /// let weighted = data.weighted(&weights)?;
    /// drop(data); // the weighted dataset keeps the rows
    /// # Ok(()) }
    /// ```
    ///
    /// The rows are shared, not copied, as by [`Dataset::slice`], and kept alive after this
    /// `Dataset` is dropped; the weights are copied (on a GPU placed beside the rows, 4 bytes a row)
    /// and replace any weights this dataset had; a slice of a weighted dataset keeps its rows'
    /// weights. `weights` holds one weight per row: another count fails with
    /// [`Status::ShapeMismatch`]; a negative, NaN or infinite weight with [`Status::InvalidArgument`].
    pub fn weighted(&self, weights: &[f32]) -> Result<Dataset> {
        self.derive(|source, out| unsafe {
            sys::mpt_dataset_create_weighted(source, weights.as_ptr(), count(weights.len()), out)
        })
    }

    /// A dataset of this one's rows standardized feature by feature, as Keras's `Normalization`
    /// layer does: feature `f` of every batch holds `(x - mean[f]) / max(stddev[f], 1e-7)`, where `x`
    /// is what this dataset gives (a uint8 sample after its scale and offset), each operation rounded
    /// in `f32`. For [`Trainer::fit`], [`Trainer::step`], [`Trainer::evaluate`] and
    /// [`Trainer::predict_dataset`] alike; [`Trainer::predict`] and [`Model::predict`] take their
    /// inputs as given, so standardize those yourself, or have the model standardize them
    /// ([`Model::set_input_standardization`], saved with it) instead. Use the training set's
    /// [`Dataset::feature_statistics`] for the validation and test sets too:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// let (mean, stddev) = data.slice(0, 80)?.feature_statistics()?;
    /// let training = data.slice(0, 80)?.standardized(&mean, &stddev)?;
    /// let validation = data.slice(80, 20)?.standardized(&mean, &stddev)?;
    /// # Ok(()) }
    /// ```
    ///
    /// The rows are shared, not copied, as by [`Dataset::slice`] (a uint8 dataset stays 1 byte a
    /// value), and kept alive after this `Dataset` is dropped; the statistics are copied and replace
    /// any standardization this dataset had, and slices, weighted datasets and subsets of the result
    /// keep them. `mean` and `stddev` hold one value per feature: another count (or lengths that
    /// differ) fails with [`Status::ShapeMismatch`], a non-finite mean or a negative or non-finite
    /// standard deviation with [`Status::InvalidArgument`] naming the first such.
    pub fn standardized(&self, mean: &[f32], stddev: &[f32]) -> Result<Dataset> {
        // One count reaches C: slices of different lengths are the shape mismatch it reports for a
        // count other than the features.
        if mean.len() != stddev.len() {
            return Err(Error::new(
                Status::ShapeMismatch,
                format!(
                    "standardization takes one mean and one stddev per feature ({} means and {} \
                     stddevs given)",
                    mean.len(),
                    stddev.len()
                ),
            ));
        }
        self.derive(|source, out| unsafe {
            sys::mpt_dataset_create_standardized(
                source,
                mean.as_ptr(),
                stddev.as_ptr(),
                count(mean.len()),
                out,
            )
        })
    }

    /// Each feature's mean and standard deviation `(mean, stddev)` over this dataset's rows (a
    /// slice's own), of the values its batches hold (standardized ones, for a
    /// [`Dataset::standardized`] dataset): the population's, divided by the rows, as Keras's
    /// `Normalization.adapt`, summed in `f64`. [`Dataset::standardized`] with them gives features of
    /// mean 0 and standard deviation 1.
    pub fn feature_statistics(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        let _lock = self.family.enter()?;
        let mut features = 0i64;
        check(unsafe { sys::mpt_dataset_get_features(self.raw.as_ptr(), &mut features) })?;
        let mut mean = zeroed_floats(features)?;
        let mut stddev = zeroed_floats(features)?;
        check(unsafe {
            sys::mpt_dataset_get_feature_statistics(
                self.raw.as_ptr(),
                mean.as_mut_ptr(),
                stddev.as_mut_ptr(),
                features,
            )
        })?;
        Ok((mean, stddev))
    }
}

impl Drop for Dataset {
    fn drop(&mut self) {
        self.family.destroy(RawHandle::Dataset(self.raw));
    }
}
