"""The Python client's WebSocket streams against container nodes: exec with
output, stdin and an exit code, and port-forward to a pod's port.

Usage: python_streams.py KUBECONFIG EXEC_POD WEB_POD WEB_PORT
"""

import sys

from kubernetes import client, config
from kubernetes.stream import portforward, stream

kubeconfig, exec_pod, web_pod, web_port = sys.argv[1:5]
config.load_kube_config(config_file=kubeconfig)
v1 = client.CoreV1Api()

# exec: stdout and stderr come back on their channels.
out = stream(
    v1.connect_get_namespaced_pod_exec,
    exec_pod,
    "default",
    command=["sh", "-c", "echo from python; echo to stderr >&2"],
    stderr=True,
    stdin=False,
    stdout=True,
    tty=False,
)
assert "from python" in out, out

# exec with stdin and an exit code read from the error channel.
resp = stream(
    v1.connect_get_namespaced_pod_exec,
    exec_pod,
    "default",
    command=["sh", "-c", "read line; echo got $line; exit 5"],
    stderr=True,
    stdin=True,
    stdout=True,
    tty=False,
    _preload_content=False,
)
resp.write_stdin("through python\n")
resp.run_forever(timeout=30)
got = resp.read_stdout()
assert got == "got through python\n", repr(got)
assert resp.returncode == 5, resp.returncode
resp.close()

# port-forward: an HTTP request over the forwarded socket.
pf = portforward(
    v1.connect_get_namespaced_pod_portforward, web_pod, "default", ports=web_port
)
sock = pf.socket(int(web_port))
sock.setblocking(True)
sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
page = b""
while True:
    chunk = sock.recv(4096)
    if not chunk:
        break
    page += chunk
sock.close()
assert page.endswith(b"forwarded\n"), page
err = pf.error(int(web_port))
assert err is None, err
pf.close()
print("python streams ok")
