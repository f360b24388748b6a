//! CustomResourceDefinitions for a test environment: reading them from YAML
//! files (multi-document, as kubebuilder's `config/crd/bases` holds them) and
//! installing them, waiting until each is Established.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use serde_json::Value;

use crate::Error;

/// How long a CRD may take to become Established. The embedded server
/// establishes a CRD as it stores it; the bound only keeps a broken server
/// from hanging a test.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Every CRD in the `.yaml`, `.yml` and `.json` files directly inside `dir`
/// (sorted by file name). Documents of other kinds (a `kustomization.yaml`,
/// a Namespace) are skipped; a directory without any CRD is an error, as it
/// most likely is a wrong path.
pub fn read_dir(dir: &Path) -> Result<Vec<CustomResourceDefinition>, Error> {
    let io = |source| Error::ReadCrds {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    files.retain(|p| {
        p.is_file()
            && p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
    });
    files.sort();
    let mut crds = Vec::new();
    for f in &files {
        crds.extend(read_file(f)?);
    }
    if crds.is_empty() {
        return Err(Error::NoCrds(dir.to_path_buf()));
    }
    Ok(crds)
}

/// The CRDs in one YAML (or JSON) file, any number of documents.
pub fn read_file(path: &Path) -> Result<Vec<CustomResourceDefinition>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadCrds {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|(document, message)| Error::ParseCrd {
        path: path.to_path_buf(),
        document,
        message,
    })
}

/// The CRDs in a YAML text; on failure, the 1-based document number and
/// what is wrong.
fn parse(text: &str) -> Result<Vec<CustomResourceDefinition>, (usize, String)> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| (0, format!("not valid YAML: {e}")))?;
    let mut crds = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind != "CustomResourceDefinition" {
            tracing::debug!(document = i + 1, kind, "not a CRD, skipped");
            continue;
        }
        if api_version != "apiextensions.k8s.io/v1" {
            return Err((
                i + 1,
                format!(
                    "apiVersion {api_version:?} is not served; CRDs must be apiextensions.k8s.io/v1"
                ),
            ));
        }
        let crd = serde_json::from_value(doc)
            .map_err(|e| (i + 1, format!("not a valid CustomResourceDefinition: {e}")))?;
        crds.push(crd);
    }
    Ok(crds)
}

/// Create each CRD through `client` and wait until it is Established.
pub(crate) async fn install(
    client: &kube::Client,
    crds: Vec<CustomResourceDefinition>,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let established = conditions::is_crd_established();
    for mut crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        // A CRD exported from a cluster may carry fields the server sets.
        crd.metadata.resource_version = None;
        crd.metadata.uid = None;
        crd.status = None;
        let created = api
            .create(&PostParams::default(), &crd)
            .await
            .map_err(|source| Error::InstallCrd {
                name: name.clone(),
                source,
            })?;
        if established.matches_object(Some(&created)) {
            continue;
        }
        let wait = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(ESTABLISH_TIMEOUT, wait).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(Error::NotEstablished {
                    name,
                    message: e.to_string(),
                });
            }
            Err(_) => {
                return Err(Error::NotEstablished {
                    name,
                    message: format!("not Established after {ESTABLISH_TIMEOUT:?}"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_document_yaml_skipping_other_kinds() {
        let text = r#"---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object}}
---
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
"#;
        let crds = parse(text).expect("parses");
        assert_eq!(crds.len(), 1);
        assert_eq!(
            crds[0].metadata.name.as_deref(),
            Some("widgets.example.com")
        );
    }

    #[test]
    fn names_the_bad_document() {
        let text = "kind: ConfigMap\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: 3\n";
        let (doc, msg) = parse(text).expect_err("bad spec");
        assert_eq!(doc, 2);
        assert!(msg.contains("CustomResourceDefinition"), "{msg}");
        let (doc, msg) =
            parse("apiVersion: apiextensions.k8s.io/v1beta1\nkind: CustomResourceDefinition\n")
                .expect_err("v1beta1");
        assert_eq!(doc, 1);
        assert!(msg.contains("v1beta1"), "{msg}");
        assert!(parse("a: [").is_err());
    }
}
