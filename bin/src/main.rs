//! `skiff`: the single binary that runs the control plane or any piece of it.

fn main() {
    println!("skiff {}", env!("CARGO_PKG_VERSION"));
}
