//! `rzinject`: the zinject(8) of rzfs (device fault injection). A thin client of `rzfsd`.
fn main() {
    rzfs_cli::client::main_forward("rzinject")
}
