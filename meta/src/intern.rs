//! `'static` copies of strings and lists made at run time, for the names of kinds that
//! CustomResourceDefinitions define.
//!
//! A [`ResourceInfo`](crate::ResourceInfo) is plain `'static` data, so that every handler, cache
//! and selector can hold it for free. A kind defined at run time gets its names through here: each
//! distinct string (and list) is copied once for the life of the process and shared by every later
//! request for it, so re-creating the same CustomResourceDefinition, or every API server in one
//! process serving it, costs nothing more. What stays behind is bounded by the distinct names ever
//! defined, a few hundred bytes per kind; nothing else (schemas, objects) is kept this way.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

fn strings() -> &'static Mutex<HashSet<&'static str>> {
    static STRINGS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    STRINGS.get_or_init(Default::default)
}

fn lists() -> &'static Mutex<HashSet<&'static [&'static str]>> {
    static LISTS: OnceLock<Mutex<HashSet<&'static [&'static str]>>> = OnceLock::new();
    LISTS.get_or_init(Default::default)
}

/// The process's one `'static` copy of `s`.
pub fn str(s: &str) -> &'static str {
    let mut set = strings().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// The process's one `'static` copy of a list of strings.
pub fn list<S: AsRef<str>>(items: &[S]) -> &'static [&'static str] {
    let items: Vec<&'static str> = items.iter().map(|s| str(s.as_ref())).collect();
    let mut set = lists().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(items.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(items.into_boxed_slice());
    set.insert(leaked);
    leaked
}

/// A `'static` copy of any value, made once per distinct value (for the small records a kind's
/// [`ResourceInfo`](crate::ResourceInfo) points at: its subresources, selectable fields, itself).
pub fn value<T: Eq + std::hash::Hash + Send + Sync + 'static>(v: T) -> &'static T {
    use std::any::{Any, TypeId};
    use std::collections::HashMap;
    type Sets = HashMap<TypeId, Box<dyn Any + Send + Sync>>;
    static VALUES: OnceLock<Mutex<Sets>> = OnceLock::new();
    let mut sets = VALUES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let set = sets
        .entry(TypeId::of::<T>())
        .or_insert_with(|| Box::new(HashSet::<&'static T>::new()))
        .downcast_mut::<HashSet<&'static T>>()
        .expect("one set per type");
    if let Some(found) = set.get(&v) {
        return found;
    }
    let leaked: &'static T = Box::leak(Box::new(v));
    set.insert(leaked);
    leaked
}

/// A `'static` copy of a slice of values, made once per distinct slice.
pub fn slice<T: Clone + Eq + std::hash::Hash + Send + Sync + 'static>(items: &[T]) -> &'static [T] {
    let boxed: Vec<T> = items.to_vec();
    let interned: &'static Vec<T> = value(boxed);
    interned.as_slice()
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_copy_per_distinct_value() {
        let a = super::str(&String::from("widgets"));
        let b = super::str("widgets");
        assert!(std::ptr::eq(a, b));
        let l1 = super::list(&["wd", "w"]);
        let l2 = super::list(&[String::from("wd"), String::from("w")]);
        assert!(std::ptr::eq(l1, l2));
        assert_ne!(super::list(&["w"]), l1);
        let v1 = super::slice(&[1u32, 2]);
        let v2 = super::slice(&[1u32, 2]);
        assert!(std::ptr::eq(v1, v2));
    }
}
