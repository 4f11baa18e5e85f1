//! `resource.Quantity`, whose one implementation lives in `skiff-meta` (components sum and
//! compare quantities too); re-exported here where validation has always found it.

pub use skiff_meta::quantity::*;
