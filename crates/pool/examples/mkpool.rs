//! Development aid: creates a pool on files. `mkpool NAME raidz1|mirror|stripe FILE...`
use rzfs_pool::create::{create, CreateSpec, NewLeaf, NewTop};
use rzfs_pool::writer::Policy;
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = &args[1];
    let layout = &args[2];
    let leaves: Vec<NewLeaf> = args[3..]
        .iter()
        .map(|p| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
                .unwrap();
            if f.metadata().unwrap().len() == 0 {
                f.set_len(256 << 20).unwrap();
            }
            NewLeaf {
                path: p.clone(),
                device: Arc::new(vdev::FileDevice::open(p, true).unwrap()),
                is_disk: false,
            }
        })
        .collect();
    let tops = match layout.as_str() {
        "raidz1" => vec![NewTop::Raidz { parity: 1, leaves }],
        "raidz2" => vec![NewTop::Raidz { parity: 2, leaves }],
        "mirror" => vec![NewTop::Mirror(leaves)],
        _ => leaves.into_iter().map(NewTop::Single).collect(),
    };
    let features: Vec<_> =
        ["async_destroy", "empty_bpobj", "lz4_compress", "extensible_dataset", "enabled_txg"]
            .iter()
            .map(|n| rzfs_pool::feature_table::by_name(n).unwrap())
            .collect();
    let init = |_os: &mut dmu::tx::DirtyObjset, _z: &mut zap::write::ZapCache| Ok(());
    let spec = CreateSpec {
        name: name.clone(),
        tops,
        log: Vec::new(),
        ashift: 9,
        features,
        root_props: vec![],
        pool_props: vec![],
        init_root: &init,
        root_policy: Policy::dataset(7, 15, 1),
        cache_bytes: arc::DEFAULT_LIMIT_BYTES,
        label_name: None,
    };
    match create(&spec) {
        Ok(w) => println!("created {} txg {}", w.name, w.txg),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    }
}
