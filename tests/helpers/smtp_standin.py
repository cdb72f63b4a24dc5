"""A mail server on loopback for tests, speaking SMTP over a socket (RFC 5321: EHLO/HELO, AUTH
PLAIN, MAIL, RCPT, DATA with dot-unstuffing, RSET, NOOP, QUIT; no TLS, so it offers no STARTTLS).
It keeps each accepted message (envelope and parsed message); `fail_next` answers the next MAIL
commands with a temporary failure (451), as a busy server does."""

from __future__ import annotations

import base64
import socketserver
import threading
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: EmailMessage


class SmtpStandIn:
    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        self.received: list[Received] = []
        self.fail_next = 0
        self.attempts = 0
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def say(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self) -> None:
                self.say("220 standin.example ESMTP")
                sender, recipients, authed = None, [], credentials is None
                while line := self.rfile.readline():
                    command = line.decode().rstrip("\r\n")
                    verb = command[:4].upper()
                    if verb == "EHLO":
                        self.say("250-standin.example" + ("\r\n250-AUTH PLAIN" if credentials else ""))
                        self.say("250 8BITMIME")
                    elif verb == "HELO":
                        self.say("250 standin.example")
                    elif verb == "AUTH":
                        _, user, password = base64.b64decode(command.split()[-1]).decode().split("\0")   # PLAIN
                        authed = (user, password) == credentials
                        self.say("235 2.7.0 accepted" if authed else "535 5.7.8 bad credentials")
                    elif verb == "MAIL":
                        outer.attempts += 1
                        if not authed:
                            self.say("530 5.7.0 authentication required")
                        elif outer.fail_next:
                            outer.fail_next -= 1
                            self.say("451 4.3.0 try again later")
                        else:
                            sender, recipients = command.split(":", 1)[1].split()[0].strip("<>"), []
                            self.say("250 ok")
                    elif verb == "RCPT":
                        recipients.append(command.split(":", 1)[1].split()[0].strip("<>"))
                        self.say("250 ok")
                    elif verb == "DATA":
                        self.say("354 end with <CRLF>.<CRLF>")
                        lines = []
                        while (data := self.rfile.readline()) not in (b".\r\n", b""):
                            lines.append(data[1:] if data.startswith(b"..") else data)
                        message = message_from_bytes(b"".join(lines), policy=policy.default)
                        assert isinstance(message, EmailMessage)
                        outer.received.append(Received(sender or "", recipients, message))
                        self.say("250 queued")
                    elif verb == "QUIT":
                        self.say("221 bye")
                        return
                    elif verb in ("RSET", "NOOP"):
                        self.say("250 ok")
                    else:
                        self.say("502 5.5.2 not implemented")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, user: str | None = None, password: str | None = None) -> str:
        auth = f"{user}:{password}@" if user is not None else ""
        return f"smtp://{auth}127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
