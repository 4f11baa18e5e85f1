//! A containerd lab of the tests' own ([`skiff_tests::containerd::Lab`]) kept running for a
//! manual run against it, such as `skiff bench node --container-runtime-endpoint ...`: it prints
//! the flags to use, waits until its standard input closes (Ctrl-D, or the end of a pipe), then
//! tears everything down. Needs root and the packages `.ci/run` installs.
//!
//! ```text
//! cargo run --release -p skiff-tests --example containerd_lab
//! ```

use std::io::Read;

fn main() {
    if !skiff_tests::containerd::available() {
        eprintln!("containerd_lab: not root, or a program the lab needs is missing");
        std::process::exit(2);
    }
    let mut lab = skiff_tests::containerd::Lab::start();
    println!("endpoint: {}", lab.endpoint());
    println!("image:    {}", lab.image);
    println!(
        "skiff bench node --container-runtime-endpoint {} --image {} --server-arg=--cgroup-root={}",
        lab.endpoint(),
        lab.image,
        lab.cgroup_parent
    );
    println!("(close standard input to tear the lab down)");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    lab.teardown();
    let left = lab.leftovers();
    if !left.is_empty() {
        eprintln!("left behind: {left:?}");
        std::process::exit(1);
    }
}
