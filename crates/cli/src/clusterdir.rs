//! Which cluster a command acts on: `--data-dir DIR`, or `--name NAME`, a
//! data directory of its own under the user's data home
//! (`$XDG_DATA_HOME/kubeforge/clusters/NAME`, else
//! `~/.local/share/kubeforge/clusters/NAME`), so that `up`, `clean` and
//! `image build` find one cluster by name from any folder, as kind names
//! clusters.

use std::path::PathBuf;

/// `--name`'s parser: a DNS label (kube's rule, as kind's cluster names),
/// turned into its data directory.
pub fn named(name: &str) -> Result<PathBuf, String> {
    let problems = kubeforge_apimachinery::names::is_dns1123_label(name);
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let home = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local").join("share"))
        })
        .ok_or("neither XDG_DATA_HOME nor HOME is set: pass --data-dir instead")?;
    Ok(home.join("kubeforge").join("clusters").join(name))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_a_dns_label_under_the_data_home() {
        let dir = named("dev").unwrap();
        assert!(dir.ends_with("kubeforge/clusters/dev"), "{}", dir.display());
        assert!(named("../x").is_err());
        assert!(named("Dev").is_err());
        assert!(named("").is_err());
    }
}
