//! kubeforge-cni: a CNI plugin in the role of the reference `bridge`
//! plugin, with `host-local` IPAM built in (same netconf fields, same
//! on-disk store), speaking CNI spec 0.3.0, 0.3.1, 0.4.0, 1.0.0 and 1.1.0
//! (ADD, DEL, CHECK, VERSION, GC, STATUS).
//!
//! Nodes run it as the `kubeforge-cni` binary from the runtime's CNI bin
//! directory; [`plugin_main`] is the whole binary, so another executable
//! can be a multi-call front for it. It starts cheap: no async runtime,
//! synchronous rtnetlink, one short-lived thread to enter the container's
//! network namespace.
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "kubeforge", "type": "kubeforge-cni",
//!  "bridge": "cni0", "isGateway": true, "isDefaultGateway": true,
//!  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}}
//! ```
//!
//! ```no_run
//! // A multi-call binary's dispatch:
//! std::process::exit(kubeforge_cni::plugin_main());
//! ```

pub mod env;
pub mod error;
pub mod ip;
pub mod ipam;
pub mod netconf;
pub mod netlink;
pub mod plugin;
pub mod result;
pub mod version;

use std::io::{Read, Write};

pub use env::{CniEnv, Command, parse_cni_args, parse_env};
pub use error::CniError;
pub use netconf::{NetConf, parse_netconf};
pub use plugin::run;
pub use result::{CniResult, parse_result};
pub use version::{SUPPORTED_VERSIONS, SpecVersion};

/// Runs the plugin as a CNI runtime invokes it: `CNI_*` from the process
/// environment, the netconf from stdin, the result (or the error JSON) on
/// stdout. Returns the process exit code (0 on success, 1 on error).
pub fn plugin_main() -> i32 {
    let mut stdin = Vec::new();
    let outcome = match std::io::stdin().read_to_end(&mut stdin) {
        Err(e) => Err(CniError::io(
            "reading the network configuration from stdin",
            e,
        )),
        Ok(_) => parse_env(|k| std::env::var(k).ok()).and_then(|env| run(&env, &stdin)),
    };
    let (out, code) = match outcome {
        Ok(None) => return 0,
        Ok(Some(v)) => (v, 0),
        Err(e) => (e.to_json(plugin::error_version(&stdin)), 1),
    };
    let mut stdout = std::io::stdout().lock();
    let mut bytes = serde_json::to_vec(&out).unwrap_or_default();
    bytes.push(b'\n');
    if stdout
        .write_all(&bytes)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 1;
    }
    code
}
