"""Drive kubeforge with the official Python client (kubernetes package).

Usage: python3 python_client.py KUBECONFIG. Exits non-zero on the first
failed check (assertions), printing what went wrong.
"""
import sys
import time

from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    apps = client.AppsV1Api()

    names = [n.metadata.name for n in core.list_namespace().items]
    assert "default" in names, names

    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c", labels={"a": "1"}), data={"k": "v"})
    created = core.create_namespaced_config_map("py", cm)
    assert created.metadata.resource_version, created
    try:
        core.create_namespaced_config_map("py", cm)
        raise AssertionError("duplicate create succeeded")
    except ApiException as e:
        assert e.status == 409 and "AlreadyExists" in e.body, (e.status, e.body)

    patched = core.patch_namespaced_config_map("c", "py", {"data": {"k2": "v2"}})
    assert patched.data == {"k": "v", "k2": "v2"}, patched.data
    got = core.read_namespaced_config_map("c", "py")
    assert got.data["k2"] == "v2"
    sel = core.list_namespaced_config_map("py", label_selector="a=1")
    assert [c.metadata.name for c in sel.items] == ["c"]

    dep = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}},
    }
    apps.create_namespaced_deployment("py", dep)
    # Strategic merge patch on a built-in kind: containers merge by name.
    apps.patch_namespaced_deployment("web", "py", {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})
    d = apps.read_namespaced_deployment("web", "py")
    assert [c.image for c in d.spec.template.spec.containers] == ["nginx:1.27"], d.spec.template.spec.containers
    scale = apps.read_namespaced_deployment_scale("web", "py")
    assert scale.spec.replicas == 1

    # A budget that allows no disruption: the eviction is a 429 with kube's
    # message, and the pod stays.
    # (A Deployment of its own: "web" is still rolling out its patch.)
    guarded = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "guarded"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "guarded"}},
                 "template": {"metadata": {"labels": {"app": "guarded"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }
    apps.create_namespaced_deployment("py", guarded)
    policy = client.PolicyV1Api()
    policy.create_namespaced_pod_disruption_budget("py", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    pod = None
    for _ in range(600):
        pdb = policy.read_namespaced_pod_disruption_budget("guarded", "py")
        running = [p for p in core.list_namespaced_pod("py", label_selector="app=guarded").items
                   if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        if pdb.status and pdb.status.current_healthy == 1 and pdb.status.observed_generation == 1 and running:
            pod = running[0].metadata.name
            break
        time.sleep(0.1)
    assert pod, "the budget never saw the ready pod"
    assert pdb.status.disruptions_allowed == 0 and pdb.status.desired_healthy == 1, pdb.status
    try:
        core.create_namespaced_pod_eviction(pod, "py", client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod, namespace="py")))
        raise AssertionError("an eviction broke the budget")
    except ApiException as e:
        assert e.status == 429, (e.status, e.body)
        assert "Cannot evict pod as it would violate the pod's disruption budget." in e.body, e.body
    core.read_namespaced_pod(pod, "py")

    # ReplicationControllers and their scale.
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "old"},
          "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "old"}},
                   "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    created = core.create_namespaced_replication_controller("py", rc)
    assert created.spec.selector == {"app": "old"}, created.spec.selector
    rc_scale = core.read_namespaced_replication_controller_scale("old", "py")
    assert rc_scale.spec.replicas == 2 and rc_scale.status.selector == "app=old", rc_scale

    # Watch sees a change made after it started.
    w = watch.Watch()
    seen = []
    rv = core.list_namespaced_config_map("py").metadata.resource_version
    core.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="w")))
    for ev in w.stream(core.list_namespaced_config_map, "py", resource_version=rv, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["object"].metadata.name == "w":
            w.stop()
    assert ("ADDED", "w") in seen, seen

    # CRD and custom objects.
    ext = client.ApiextensionsV1Api()
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {"group": "stable.example.com", "scope": "Namespaced",
                 "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "shortNames": ["ct"]},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {"cronSpec": {"type": "string"}, "image": {"type": "string"}}}}}}}]},
    }
    ext.create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi()
    obj = {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "ct1"}, "spec": {"cronSpec": "* * * * */5"}}
    custom.create_namespaced_custom_object("stable.example.com", "v1", "py", "crontabs", obj)
    custom.patch_namespaced_custom_object("stable.example.com", "v1", "py", "crontabs", "ct1", {"spec": {"image": "img"}})
    got = custom.get_namespaced_custom_object("stable.example.com", "v1", "py", "crontabs", "ct1")
    assert got["spec"] == {"cronSpec": "* * * * */5", "image": "img"}, got
    try:
        custom.create_namespaced_custom_object("stable.example.com", "v1", "py", "crontabs",
                                               {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "bad"}, "spec": {"cronSpec": 5}})
        raise AssertionError("invalid CronTab accepted")
    except ApiException as e:
        assert e.status == 422 and "spec.cronSpec" in e.body, (e.status, e.body)

    # The dynamic client discovers the custom resource.
    dyn = dynamic.DynamicClient(client.ApiClient())
    crontabs = dyn.resources.get(api_version="stable.example.com/v1", kind="CronTab")
    items = crontabs.get(namespace="py").items
    assert [i.metadata.name for i in items] == ["ct1"], items

    core.delete_namespaced_config_map("c", "py")
    try:
        core.read_namespaced_config_map("c", "py")
        raise AssertionError("deleted ConfigMap still readable")
    except ApiException as e:
        assert e.status == 404, e.status
    service_account_token(core)
    core.delete_namespace("py")
    print("python client: all checks passed")


def service_account_token(core):
    """A ServiceAccount token from the TokenRequest API authenticates a
    second client, which RBAC then limits (what in-cluster config does)."""
    core.create_namespaced_service_account("py", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="bot")))
    req = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = core.create_namespaced_service_account_token("bot", "py", req).status.token
    admin = client.Configuration.get_default_copy()
    bot_conf = client.Configuration(host=admin.host)
    bot_conf.ssl_ca_cert = admin.ssl_ca_cert
    bot_conf.api_key = {"authorization": "Bearer " + token}
    bot = client.CoreV1Api(client.ApiClient(bot_conf))
    try:
        bot.list_namespaced_config_map("py")
        raise AssertionError("the bot listed ConfigMaps without a role")
    except ApiException as e:
        assert e.status == 403, (e.status, e.body)
        assert 'User \\"system:serviceaccount:py:bot\\" cannot list resource \\"configmaps\\"' in e.body, e.body
    rbac = client.RbacAuthorizationV1Api()
    rbac.create_namespaced_role("py", client.V1Role(
        metadata=client.V1ObjectMeta(name="cm-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["list"])]))
    rbac.create_namespaced_role_binding("py", client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="bot-reads"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="cm-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="bot", namespace="py")]))
    core.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="for-bot")))
    names = [c.metadata.name for c in bot.list_namespaced_config_map("py").items]
    assert "for-bot" in names, names
    review = client.AuthenticationV1Api().create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert review.status.authenticated, review.status
    assert review.status.user.username == "system:serviceaccount:py:bot", review.status.user


if __name__ == "__main__":
    main(sys.argv[1])
