//! Scratch probe (not committed).
fn main() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..50 {
        let db = match sled::Config::new()
            .path(dir.path().join("d"))
            .flush_every_ms(Some(1000))
            .open()
        {
            Ok(db) => db,
            Err(e) => {
                println!("iteration {i}: {e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        let mut b = sled::Batch::default();
        b.insert(&b"k"[..], &b"v"[..]);
        db.apply_batch(b).unwrap();
        db.flush().unwrap();
        let d2 = db.clone();
        std::thread::spawn(move || {
            d2.flush().unwrap();
        })
        .join()
        .unwrap();
        drop(db);
    }
    println!("done");
}
