//! The `kubeforge-cni` CNI plugin binary: everything happens in
//! [`kubeforge_cni::plugin_main`].

fn main() {
    std::process::exit(kubeforge_cni::plugin_main());
}
