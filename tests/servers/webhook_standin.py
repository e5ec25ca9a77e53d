"""A STAND-IN for a chat service's incoming webhook (no emulator exists for either), exactly the one call
adapters/notify_webhook.py makes, with the wire shapes of their docs:

- Slack incoming webhooks (https://api.slack.com/messaging/webhooks): `POST /services/<T>/<B>/<token>` with a JSON
  body holding `text`; answers 200 with the plain-text body `ok`, 400 `no_text` / `invalid_payload`.
- Google Chat space webhooks (https://developers.google.com/workspace/chat/quickstart/webhooks): `POST
  /v1/spaces/<space>/messages?key=<key>&token=<token>` with `{"text": ...}`; answers 200 with the created Message
  (`{"name": "spaces/<space>/messages/<id>", "text": ...}`), 400 INVALID_ARGUMENT past 4,096 characters of text.

Test controls (not part of either API): GET /__standin/messages (every message received, in order, with its path),
POST /__standin/control {"status": 503, "times": 2} (answer the next `times` posts with `status`; times -1: all;
"reset": true also forgets the messages received).
Started by the tests on a free port in its own process group:

    python tests/servers/webhook_standin.py --port P
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from rlcleanup.stack.standins.http import JsonHandler

SLACK = re.compile(r"^/services/[A-Z0-9]+/[A-Z0-9]+/[A-Za-z0-9]+$")
GOOGLE_CHAT = re.compile(r"^/v1/spaces/([A-Za-z0-9_-]+)/messages$")
GOOGLE_CHAT_TEXT_LIMIT = 4096
SLACK_PATH = "/services/T0STANDIN/B0STANDIN/standinwebhooktoken0123"  # what the tests configure
GOOGLE_CHAT_PATH = "/v1/spaces/AAAAstandin/messages?key=standin-key&token=standin-token"


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []
        self.fail_status = 200
        self.fail_times = 0


def make_handler(state: State) -> type[JsonHandler]:
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def _text(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/__standin/messages":
                with state.lock:
                    self._reply(200, state.messages)
                return
            self._reply(404, {"error": f"no route GET {self.path}"})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path, _, query = self.path.partition("?")
            with state.lock:
                if path == "/__standin/control":
                    control = json.loads(raw or b"{}")
                    state.fail_status = int(control.get("status", 200))
                    state.fail_times = int(control.get("times", 0))
                    if control.get("reset"):
                        state.messages.clear()
                    self._reply(200, {})
                    return
                slack, chat = SLACK.match(path), GOOGLE_CHAT.match(path)
                if not slack and not chat:
                    self._text(404, "no_service")
                    return
                if state.fail_times != 0:
                    state.fail_times -= 1 if state.fail_times > 0 else 0
                    self._text(state.fail_status, "stand-in control")
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._text(400, "invalid_payload")
                    return
                text = body.get("text") if isinstance(body, dict) else None
                if not isinstance(text, str) or not text:
                    self._text(400, "no_text")
                    return
                if chat and len(text) > GOOGLE_CHAT_TEXT_LIMIT:
                    error = {"code": 400, "message": "text too long", "status": "INVALID_ARGUMENT"}
                    self._reply(400, {"error": error})
                    return
                state.messages.append({"path": path, "query": query, "body": body})
                if slack:
                    self._text(200, "ok")
                    return
                assert chat is not None
                name = f"spaces/{chat.group(1)}/messages/m{len(state.messages)}"
                self._reply(200, {"name": name, "text": text})

    return Handler


def main() -> None:
    port = argparse.ArgumentParser()
    port.add_argument("--port", type=int, required=True)
    ThreadingHTTPServer(("127.0.0.1", port.parse_args().port), make_handler(State())).serve_forever()


if __name__ == "__main__":
    main()
