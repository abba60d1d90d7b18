"""A stand-in for the Kubernetes API's node endpoint, for the one request
shmkeeper makes (shmkeeper-node-label: PATCH /api/v1/nodes/NAME, a JSON merge
patch of metadata.labels). There is no API server here: this checks the
request's shape (method, path, content type, bearer token, TLS verified
against the CA the pod is given) and keeps each node's labels as a merge
patch leaves them; it is not Kubernetes (no admission, no RBAC: `deny` makes
it answer 403 the way the API server does without the ClusterRole)."""
import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeKubeApi:
    def __init__(self, tmp_path, host="127.0.0.1", token="test-token-1"):
        self.dir = tmp_path / "fake-kube-api"
        self.sa_dir = self.dir / "serviceaccount"
        self.sa_dir.mkdir(parents=True)
        key, cert = self.dir / "key.pem", self.sa_dir / "ca.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=kube-apiserver", "-addext", f"subjectAltName=IP:{host}"],
                       check=True, capture_output=True)
        (self.sa_dir / "token").write_text(token + "\n")
        self.token, self.requests, self.labels, self.deny = token, [], {}, False
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_PATCH(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                api.requests.append({"method": "PATCH", "path": self.path, "headers": dict(self.headers),
                                     "body": json.loads(body)})
                name = self.path.rsplit("/", 1)[-1]
                if self.headers.get("Authorization") != f"Bearer {api.token}":
                    return self.reply(401, {"kind": "Status", "message": "Unauthorized"})
                if api.deny:
                    return self.reply(403, {"kind": "Status", "message": f'nodes "{name}" is forbidden: User '
                                            '"system:serviceaccount:shmkeeper:shmkeeper" cannot patch resource '
                                            '"nodes" in API group "" at the cluster scope'})
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self.reply(415, {"kind": "Status", "message": "unsupported media type"})
                labels = api.labels.setdefault(name, {})
                for k, v in json.loads(body)["metadata"]["labels"].items():
                    if v is None:
                        labels.pop(k, None)
                    else:
                        labels[k] = v
                self.reply(200, {"kind": "Node", "metadata": {"name": name, "labels": labels}})

            def reply(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def serve_in_dir(d):
    """Script mode (for a network namespace of its own): serves until
    killed; writes DIR/url, and DIR/state.json after each request."""
    from pathlib import Path
    d = Path(d)
    api = FakeKubeApi(d)
    state = d / "state.json"

    def dump():
        tmp = d / "state.json.new"
        tmp.write_text(json.dumps({"requests": api.requests, "labels": api.labels}))
        tmp.rename(state)
    handler = api.server.RequestHandlerClass
    orig = handler.do_PATCH

    def do_patch(self):
        orig(self)
        dump()
    handler.do_PATCH = do_patch
    dump()
    (d / "url.new").write_text(api.url)
    (d / "url.new").rename(d / "url")
    api.thread.join()


if __name__ == "__main__":
    import sys
    serve_in_dir(sys.argv[1])
