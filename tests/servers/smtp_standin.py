"""A STAND-IN SMTP relay (aiosmtpd is not installed here, so stdlib only): the commands smtplib's `send_message`
sends to a relay without authentication (RFC 5321: EHLO/HELO, MAIL FROM, RCPT TO, DATA, RSET, NOOP, QUIT; no
STARTTLS). Each accepted message is appended to the `--out` file as one JSON line {"from", "to", "data"}.

Test control: `--fail N` answers the first N `MAIL FROM` with 451 (a transient refusal). Started by the tests on a
free port in its own process group:

    python tests/servers/smtp_standin.py --port P --out messages.jsonl
"""

from __future__ import annotations

import argparse
import json
import socketserver
import threading
from pathlib import Path


class Relay(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], out: Path, fail: int) -> None:
        super().__init__(address, Session)
        self.out, self.fail, self.lock = out, fail, threading.Lock()


class Session(socketserver.StreamRequestHandler):
    server: Relay

    def say(self, line: str) -> None:
        self.wfile.write(f"{line}\r\n".encode())

    def handle(self) -> None:
        self.say("220 smtp-standin ESMTP")
        sender, recipients = "", []
        while raw := self.rfile.readline(1000):
            command = raw.decode(errors="replace").rstrip("\r\n")
            verb = command[:4].upper()
            if verb == "EHLO":
                self.say("250-smtp-standin")
                self.say("250 8BITMIME")
            elif verb == "HELO" or verb == "NOOP":
                self.say("250 ok")
            elif verb == "MAIL":
                with self.server.lock:
                    failing = self.server.fail > 0
                    self.server.fail -= 1 if failing else 0
                if failing:
                    self.say("451 try again later (stand-in control)")
                    continue
                sender, recipients = command.split(":", 1)[1].strip().split()[0].strip("<>"), []
                self.say("250 ok")
            elif verb == "RCPT":
                recipients.append(command.split(":", 1)[1].strip().strip("<>"))
                self.say("250 ok")
            elif verb == "DATA":
                self.say("354 end with <CRLF>.<CRLF>")
                lines = []
                while (line := self.rfile.readline()) not in (b".\r\n", b""):
                    lines.append(line[1:] if line.startswith(b"..") else line)
                with self.server.lock, self.server.out.open("a") as f:
                    data = b"".join(lines).decode(errors="replace")
                    f.write(json.dumps({"from": sender, "to": recipients, "data": data}) + "\n")
                self.say("250 queued")
            elif verb == "RSET":
                sender, recipients = "", []
                self.say("250 ok")
            elif verb == "QUIT":
                self.say("221 bye")
                return
            else:
                self.say("502 command not implemented")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fail", type=int, default=0)
    args = parser.parse_args()
    Relay(("127.0.0.1", args.port), args.out, args.fail).serve_forever()


if __name__ == "__main__":
    main()
