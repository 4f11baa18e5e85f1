//! The channel protocol of `kubectl exec` and `kubectl attach` over WebSocket, pure: which
//! subprotocol is spoken, how binary messages map to streams, the resize messages and the final
//! `Status` on the error channel.
//!
//! # What the wire carries (observed from kubectl 1.32 and read from client-go)
//! - The client opens a WebSocket (`GET`, `Upgrade: websocket`) offering subprotocols in
//!   `Sec-WebSocket-Protocol`; kubectl 1.32 offers only `v5.channel.k8s.io` (other clients, such
//!   as the Python client, offer `v4.channel.k8s.io`). The server names the one it picked in its
//!   101 answer. A refused upgrade makes kubectl retry the same request over SPDY/3.1.
//! - Every data message is a binary message whose first byte is the channel and whose rest is
//!   the payload: 0 stdin (client to server), 1 stdout, 2 stderr, 3 error (server to client), 4
//!   resize (client to server, JSON `{"Width":W,"Height":H}`, one per terminal size change, the
//!   first right after the connection opens).
//! - The error channel carries one `metav1.Status` as JSON when the command ends:
//!   `status: Success`, or `status: Failure` with `reason: NonZeroExitCode` and
//!   `details.causes: [{reason: ExitCode, message: "<code>"}]`, from which kubectl takes its
//!   own exit code; any other `Failure` is printed as an error (kubectl exits 1).
//! - v5 adds half-close: a two-byte message `[255, channel]` says the client will send no more
//!   on that channel (kubectl sends `[255, 0]` when its stdin ends). v4 has no way to say so.
//! - kubectl pings every 5 s and gives up after a minute without a pong; the server's WebSocket
//!   layer answers pings. The server ends the session with a normal Close after the error
//!   channel's `Status`.

use serde_json::{Value, json};

/// The stdin channel (client to server).
pub const STDIN: u8 = 0;
/// The stdout channel.
pub const STDOUT: u8 = 1;
/// The stderr channel.
pub const STDERR: u8 = 2;
/// The error channel: one `Status` at the end.
pub const ERROR: u8 = 3;
/// The terminal-size channel (client to server).
pub const RESIZE: u8 = 4;
/// v5's close signal: `[CLOSE, channel]`.
pub const CLOSE: u8 = 255;

/// A streaming subprotocol the kubelet speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `v4.channel.k8s.io`: JSON `Status` on the error channel, resize channel.
    V4,
    /// `v5.channel.k8s.io`: v4 plus the close signal.
    V5,
}

impl Protocol {
    /// Its `Sec-WebSocket-Protocol` name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::V4 => "v4.channel.k8s.io",
            Protocol::V5 => "v5.channel.k8s.io",
        }
    }

    /// The protocol to speak given the client's `Sec-WebSocket-Protocol` header(s): the
    /// newest one offered that is served. `None` when none is.
    pub fn negotiate<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<Protocol> {
        let mut best = None;
        for name in offered.into_iter().flat_map(|h| h.split(',')) {
            let protocol = match name.trim() {
                "v5.channel.k8s.io" => Protocol::V5,
                "v4.channel.k8s.io" => Protocol::V4,
                _ => continue,
            };
            if best.is_none_or(|b: Protocol| protocol == Protocol::V5 && b == Protocol::V4) {
                best = Some(protocol);
            }
        }
        best
    }
}

/// A message from the client, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound<'a> {
    /// Payload on a channel.
    Data(u8, &'a [u8]),
    /// v5: no more data on this channel.
    Close(u8),
    /// Nothing to act on (an empty message).
    Empty,
}

/// Why a client message is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// A close signal that is not exactly `[255, channel]`.
    #[error("invalid close message of {0} bytes")]
    BadClose(usize),
}

/// Decodes one binary message from the client.
pub fn decode(protocol: Protocol, message: &[u8]) -> Result<Inbound<'_>, FrameError> {
    match message {
        [] => Ok(Inbound::Empty),
        [CLOSE, rest @ ..] if protocol == Protocol::V5 => match rest {
            [channel] => Ok(Inbound::Close(*channel)),
            _ => Err(FrameError::BadClose(message.len())),
        },
        [channel, payload @ ..] => Ok(Inbound::Data(*channel, payload)),
    }
}

/// One message to the client: `payload` on `channel`.
pub fn encode(channel: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 1);
    out.push(channel);
    out.extend_from_slice(payload);
    out
}

/// A terminal size from the resize channel: `(width, height)` in cells; `None` for a message
/// that is not one.
pub fn decode_resize(payload: &[u8]) -> Option<(u16, u16)> {
    #[derive(serde::Deserialize)]
    struct Size {
        #[serde(rename = "Width")]
        width: u16,
        #[serde(rename = "Height")]
        height: u16,
    }
    serde_json::from_slice::<Size>(payload)
        .ok()
        .map(|s| (s.width, s.height))
}

/// Splits a stream of resize-channel bytes into whole JSON messages (a WebSocket message may
/// carry one, or clients may write them back to back): the sizes found, the rest left in `buf`.
pub fn take_resizes(buf: &mut Vec<u8>) -> Vec<(u16, u16)> {
    let mut sizes = Vec::new();
    let mut consumed = 0;
    let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<Value>();
    while let Some(Ok(value)) = values.next() {
        consumed = values.byte_offset();
        if let Some(size) = decode_resize(value.to_string().as_bytes()) {
            sizes.push(size);
        }
    }
    buf.drain(..consumed);
    sizes
}

/// The error channel's `Status` for a command that exited with `code`.
pub fn exit_status(code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: exit status {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// Reads a runtime's error-channel `Status` back: 0 for `Success`, the `ExitCode` cause of a
/// `NonZeroExitCode` failure; any other failure is its message (text that is not a `Status`
/// is the message itself), and an empty channel means the stream ended before the command
/// did.
pub fn decode_exit(status: &[u8]) -> Result<i32, String> {
    if status.iter().all(u8::is_ascii_whitespace) {
        return Err("the container runtime ended the stream without an exit status".into());
    }
    let text = || String::from_utf8_lossy(status).trim().to_string();
    let value: Value = serde_json::from_slice(status).map_err(|_| text())?;
    if value["status"] == "Success" {
        return Ok(0);
    }
    if value["reason"] == "NonZeroExitCode"
        && let Some(code) = value["details"]["causes"]
            .as_array()
            .and_then(|causes| causes.iter().find(|c| c["reason"] == "ExitCode"))
            .and_then(|cause| cause["message"].as_str())
            .and_then(|code| code.parse().ok())
    {
        return Ok(code);
    }
    Err(value["message"].as_str().map_or_else(text, str::to_string))
}

/// The error channel's `Status` for a session that failed without an exit code (the command
/// could not start, the container went away).
pub fn failure_status(message: &str) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "InternalError",
        "code": 500,
    })
}

/// What an exec or attach request asks for, from its query (`command` repeated, `stdin`,
/// `stdout`, `stderr`, `tty`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The argv (exec only).
    pub command: Vec<String>,
    /// Stream stdin.
    pub stdin: bool,
    /// Stream stdout.
    pub stdout: bool,
    /// Stream stderr (never with a TTY: the terminal merges both).
    pub stderr: bool,
    /// Run on a terminal.
    pub tty: bool,
}

impl Options {
    /// Reads the query pairs; an exec needs a command and every session at least one stream.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        exec: bool,
    ) -> Result<Options, String> {
        let mut options = Options::default();
        let flag = |v: &str| matches!(v, "1" | "true" | "True");
        for (key, value) in pairs {
            match key {
                "command" => options.command.push(value.to_string()),
                "input" | "stdin" => options.stdin = flag(value),
                "output" | "stdout" => options.stdout = flag(value),
                "error" | "stderr" => options.stderr = flag(value),
                "tty" => options.tty = flag(value),
                _ => {}
            }
        }
        if exec && options.command.is_empty() {
            return Err("you must specify at least one command for the container".into());
        }
        if !(options.stdin || options.stdout || options.stderr) {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        if options.tty {
            options.stderr = false;
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_status_reads_back_as_an_exit_code_or_its_message() {
        for code in [0, 3, 137] {
            let status = exit_status(code).to_string();
            assert_eq!(decode_exit(status.as_bytes()), Ok(code));
        }
        let failed = failure_status("OCI runtime exec failed: no such file").to_string();
        assert_eq!(
            decode_exit(failed.as_bytes()),
            Err("OCI runtime exec failed: no such file".into())
        );
        assert_eq!(decode_exit(b"plain words\n"), Err("plain words".into()));
        assert!(
            decode_exit(b"")
                .unwrap_err()
                .contains("without an exit status")
        );
        // A non-zero exit without a readable code is a failure, not a success.
        let odd = br#"{"status":"Failure","reason":"NonZeroExitCode","message":"m"}"#;
        assert_eq!(decode_exit(odd), Err("m".into()));
    }

    #[test]
    fn negotiates_the_newest_served_protocol() {
        assert_eq!(
            Protocol::negotiate(["v5.channel.k8s.io"]),
            Some(Protocol::V5)
        );
        assert_eq!(
            Protocol::negotiate(["v4.channel.k8s.io, v5.channel.k8s.io"]),
            Some(Protocol::V5)
        );
        assert_eq!(
            Protocol::negotiate(["channel.k8s.io", "v4.channel.k8s.io"]),
            Some(Protocol::V4)
        );
        assert_eq!(
            Protocol::negotiate(["base64.channel.k8s.io", "SPDY/3.1"]),
            None
        );
        assert_eq!(Protocol::negotiate([]), None);
    }

    #[test]
    fn decodes_data_close_and_empty_messages() {
        assert_eq!(
            decode(Protocol::V5, b"\x00abc"),
            Ok(Inbound::Data(0, b"abc"))
        );
        assert_eq!(decode(Protocol::V5, &[255, 0]), Ok(Inbound::Close(0)));
        assert_eq!(
            decode(Protocol::V5, &[255, 0, 1]),
            Err(FrameError::BadClose(3))
        );
        assert_eq!(decode(Protocol::V5, &[255]), Err(FrameError::BadClose(1)));
        // v4 has no close signal: 255 is just a channel nobody uses.
        assert_eq!(
            decode(Protocol::V4, &[255, 0]),
            Ok(Inbound::Data(255, &[0]))
        );
        assert_eq!(decode(Protocol::V4, &[]), Ok(Inbound::Empty));
        assert_eq!(decode(Protocol::V4, &[4]), Ok(Inbound::Data(4, &[])));
        assert_eq!(encode(STDOUT, b"hi"), b"\x01hi");
        assert_eq!(encode(ERROR, b""), [3]);
    }

    #[test]
    fn resize_messages_are_parsed_whole_or_kept_for_later() {
        assert_eq!(
            decode_resize(br#"{"Width":80,"Height":24}"#),
            Some((80, 24))
        );
        assert_eq!(decode_resize(br#"{"Width":-1,"Height":24}"#), None);
        let mut buf = br#"{"Width":80,"Height":24}{"Width":100,"Height":40}{"Wid"#.to_vec();
        assert_eq!(take_resizes(&mut buf), vec![(80, 24), (100, 40)]);
        assert_eq!(buf, br#"{"Wid"#);
        buf.extend_from_slice(br#"th":1,"Height":2}"#);
        assert_eq!(take_resizes(&mut buf), vec![(1, 2)]);
        assert!(buf.is_empty());
    }

    #[test]
    fn exit_codes_become_the_status_kubectl_reads() {
        assert_eq!(exit_status(0)["status"], "Success");
        let failed = exit_status(3);
        assert_eq!(failed["status"], "Failure");
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        let internal = failure_status("boom");
        assert_eq!(internal["status"], "Failure");
        assert_eq!(internal["message"], "boom");
    }

    #[test]
    fn options_need_a_command_and_a_stream() {
        let q = [
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo hi"),
            ("stdout", "true"),
            ("stderr", "true"),
        ];
        let o = Options::parse(q, true).unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert!(o.stdout && o.stderr && !o.stdin && !o.tty);
        assert!(Options::parse([("stdout", "true")], true).is_err());
        assert!(Options::parse([("stdout", "true")], false).is_ok());
        assert!(Options::parse([("command", "x")], true).is_err());
        let tty = Options::parse(
            [
                ("command", "sh"),
                ("stdin", "1"),
                ("stderr", "true"),
                ("tty", "true"),
            ],
            true,
        )
        .unwrap();
        assert!(tty.tty && tty.stdin && !tty.stderr);
    }
}
