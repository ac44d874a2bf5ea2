#!/usr/bin/env python3
"""A "relay" that answers 405 Method Not Allowed to every request (a test asset): a harness
run against it must end in a `setup` verdict, never a pass.

    python3 refuse_all.py --listen 127.0.0.1:8080
"""

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Refuse(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def refuse(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b'{"code":"METHOD_NOT_ALLOWED","detail":"nothing is allowed here"}'
        self.send_response(405)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_OPTIONS = refuse

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--listen", default="127.0.0.1:8080")
    a = p.parse_args()
    host, _, port = a.listen.rpartition(":")
    ThreadingHTTPServer((host, int(port)), Refuse).serve_forever()
