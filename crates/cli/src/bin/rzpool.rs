//! `rzpool`: the zpool(8) of rzfs. A thin client of `rzfsd`.
fn main() {
    rzfs_cli::client::main_forward("rzpool")
}
