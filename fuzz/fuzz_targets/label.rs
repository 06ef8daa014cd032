//! A vdev label's config area: `parse_vdev_phys`, then the typed `LabelConfig` and its vdev
//! tree; and the same bytes as a boot environment block (`parse_bootenv`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::label::{parse_bootenv, parse_vdev_phys, LabelConfig, VdevTreeConfig};

fuzz_target!(|data: &[u8]| {
    let _ = parse_bootenv(data);
    let Ok(nv) = parse_vdev_phys(data) else { return };
    if let Ok(cfg) = LabelConfig::from_nvlist(&nv) {
        if let Some(tree) = &cfg.tree {
            for v in tree.walk() {
                let _ = v.is_leaf();
            }
        }
    }
    if let Some(tree) = nv.get_nvlist("vdev_tree") {
        let _ = VdevTreeConfig::from_nvlist(tree);
    }
});
