//! `Debug` for the types that own a C handle: their name and the handle's address, as what they hold
//! lives in C.

use crate::{Context, Dataset, Model, Trainer};
use std::fmt;

macro_rules! debug_handle {
    ($($name:ident),*) => {$(
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:p})"), self.raw.as_ptr())
            }
        }
    )*};
}
debug_handle!(Context, Model, Dataset, Trainer);
