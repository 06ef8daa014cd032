//! Development aid: exercises multi-txg writes, frees, export and read-write re-import on
//! an existing pool. `rwcycle DIR POOL`
use rzfs_pool::writer::Policy;
use std::path::PathBuf;

fn policy() -> Policy {
    Policy::dataset(7, 15, 1)
}

fn rnd(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn open(dir: &str, name: &str) -> (rzfs_pool::Pool, rzfs_pool::writer::PoolWriter, u64) {
    let cands = rzfs_pool::discover(&[PathBuf::from(dir)], false).unwrap();
    let c = rzfs_pool::discover::select(&cands, name).unwrap();
    let opts = rzfs_pool::ImportOpts { readonly: false, ..Default::default() };
    let p = rzfs_pool::import(c, &opts).unwrap();
    let mut w = rzfs_pool::open_rw::open_rw(&p).unwrap();
    let root_dir = zap::lookup_u64(&p.mos, 1, "root_dataset").unwrap().unwrap();
    let ds = dsl::write::dir_phys(&w.mos, root_dir).unwrap().head_dataset_obj;
    w.open_dataset(ds, policy()).unwrap();
    (p, w, ds)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (dir, name) = (&a[1], &a[2]);
    let (_p, mut w, ds) = open(dir, name);
    let obj;
    {
        let d = w.dataset(ds).unwrap();
        obj = d.os.alloc_object(19, 128 << 10, 0, Vec::new()).unwrap();
        d.os.write(obj, 0, &rnd(3 << 20, 1)).unwrap();
        d.os.write(obj, 64 << 20, &rnd(1 << 20, 2)).unwrap();
    }
    w.sync().unwrap();
    for i in 0..5u64 {
        let d = w.dataset(ds).unwrap();
        d.os.write(obj, i * 300_000, &rnd(500_000, 10 + i)).unwrap();
        if i == 3 {
            d.os.free_range(obj, 1 << 20, 1 << 20).unwrap();
        }
        w.sync().unwrap();
    }
    println!("txg {}", w.txg);
    w.close(ondisk::label::PoolState::Exported).unwrap();
    drop(w);
    let (_p, mut w, ds) = open(dir, name);
    {
        let d = w.dataset(ds).unwrap();
        d.os.write(obj, 5 << 20, &rnd(2 << 20, 99)).unwrap();
        d.os.free_range(obj, 64 << 20, u64::MAX).unwrap();
    }
    w.sync().unwrap();
    w.close(ondisk::label::PoolState::Exported).unwrap();
    println!("ok obj {obj}");
}
