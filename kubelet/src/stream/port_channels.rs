//! Port-forward over WebSocket channels, as client libraries speak it (the Python client's
//! `portforward`, kube-rs's `Portforwarder`), beside the SPDY sessions of kubectl
//! ([`super::portforward`]).
//!
//! The ports come in the URL (`port=8080&port=9090`, or `ports=8080,9090` as the pod's
//! `portforward` subresource names them). Each port gets two channels, data `2i` and error
//! `2i+1`; each channel's first message is the port, two bytes little-endian. There is one
//! connection per port for the whole session: what the client sends on channel `2i` goes to it,
//! what it answers comes back on `2i`, and a failure to reach it is a message on `2i+1`. When
//! every port's connection has ended the session closes, which is how the client learns that
//! a connection ended (channels cannot be closed one by one). Messages are binary (subprotocol
//! `v4.channel.k8s.io`, or none) with the channel as their first byte, or text
//! (`v4.base64.channel.k8s.io`) with the channel as an ASCII digit and the bytes in base64.

use base64::Engine;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use warp::ws::{Message, WebSocket};

use super::portforward::Dial;

/// Bytes read from the pod per message.
const CHUNK: usize = 32 * 1024;

/// How a session frames its channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Binary messages, the channel in the first byte.
    Binary,
    /// Text messages, the channel as an ASCII digit, then the bytes in base64.
    Base64,
}

/// The binary subprotocol.
pub const BINARY_PROTOCOL: &str = "v4.channel.k8s.io";
/// The base64 subprotocol.
pub const BASE64_PROTOCOL: &str = "v4.base64.channel.k8s.io";

impl Framing {
    /// The framing of the first subprotocol offered that this server speaks, with its name for
    /// the answer; binary, unnamed, when none was offered; `None` when only others were.
    pub fn negotiate(offered: &[&str]) -> Option<(Framing, Option<&'static str>)> {
        if offered.is_empty() {
            return Some((Framing::Binary, None));
        }
        offered.iter().find_map(|p| match *p {
            BINARY_PROTOCOL => Some((Framing::Binary, Some(BINARY_PROTOCOL))),
            BASE64_PROTOCOL => Some((Framing::Base64, Some(BASE64_PROTOCOL))),
            _ => None,
        })
    }

    /// One message carrying `data` on `channel`.
    pub fn encode(self, channel: u8, data: &[u8]) -> Message {
        match self {
            Framing::Binary => {
                let mut bytes = Vec::with_capacity(data.len() + 1);
                bytes.push(channel);
                bytes.extend_from_slice(data);
                Message::binary(bytes)
            }
            Framing::Base64 => {
                let mut text = String::with_capacity(data.len() * 4 / 3 + 5);
                text.push(char::from(b'0' + channel));
                base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
                Message::text(text)
            }
        }
    }

    /// The channel and bytes of a client's message; `None` for messages that carry none (pings,
    /// an empty message, binary in a base64 session, bad base64).
    pub fn decode(self, message: &Message) -> Option<(u8, Vec<u8>)> {
        let bytes = message.as_bytes();
        let (&first, rest) = bytes.split_first()?;
        match self {
            // Text frames are read like binary ones, as Kubernetes reads them.
            Framing::Binary if message.is_binary() || message.is_text() => {
                Some((first, rest.to_vec()))
            }
            Framing::Base64 if message.is_text() => {
                let channel = first.checked_sub(b'0').filter(|c| *c <= 9)?;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(rest)
                    .ok()?;
                Some((channel, data))
            }
            _ => None,
        }
    }
}

/// The ports a session forwards, from the URL's `port` and `ports` parameters (each may list
/// several, comma-separated), in order; or why they are unusable.
pub fn ports(query: &[(String, String)]) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for (key, value) in query {
        if key != "port" && key != "ports" {
            continue;
        }
        for text in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let port: u16 = text
                .parse()
                .map_err(|e| format!("unable to parse {text:?} as a port: {e}"))?;
            if port == 0 {
                return Err(format!("port {text:?} must be > 0"));
            }
            if ports.contains(&port) {
                return Err(format!("port {port} is asked for twice"));
            }
            ports.push(port);
        }
    }
    if ports.is_empty() {
        return Err("at least 1 port must be specified".into());
    }
    if ports.len() > 128 {
        return Err("at most 128 ports may be forwarded in one session".into());
    }
    Ok(ports)
}

/// Serves one session on `ws`: a connection per port of `ports`, each opened by `dial` (`pod`
/// names the pod in errors), until every connection ended or the client went away.
pub async fn serve(ws: WebSocket, framing: Framing, ports: Vec<u16>, dial: Dial, pod: String) {
    let (mut sink, mut inbound) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            if sink.send(message).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::close()).await;
        let _ = sink.close().await;
    });
    let mut to_pod = Vec::with_capacity(ports.len());
    let mut connections = tokio::task::JoinSet::new();
    for (index, port) in ports.iter().copied().enumerate() {
        let data = (2 * index) as u8;
        for channel in [data, data + 1] {
            if out_tx
                .send(framing.encode(channel, &port.to_le_bytes()))
                .await
                .is_err()
            {
                return;
            }
        }
        let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
        to_pod.push(Some(tx));
        connections.spawn(connect(
            dial.clone(),
            port,
            data,
            framing,
            rx,
            out_tx.clone(),
            pod.clone(),
        ));
    }
    drop(out_tx);
    loop {
        tokio::select! {
            message = inbound.next() => {
                let Some(Ok(message)) = message else { break };
                if message.is_close() {
                    break;
                }
                let Some((channel, data)) = framing.decode(&message) else { continue };
                // Only data channels carry bytes toward the pod; what comes on an error channel
                // (or a channel no port has) is dropped, as the kubelet of Kubernetes does.
                let slot = to_pod.get_mut(usize::from(channel / 2)).filter(|_| channel % 2 == 0);
                if let Some(slot) = slot
                    && let Some(tx) = slot
                    && tx.send(data).await.is_err()
                {
                    *slot = None;
                }
            }
            done = connections.join_next() => {
                if done.is_none() {
                    break;
                }
            }
        }
    }
    // The client went away, or every connection ended: what is left stops here, and the writer
    // closes the session once the last message is out.
    drop(to_pod);
    connections.shutdown().await;
    let _ = writer.await;
}

/// One port's connection: dialled, then its bytes both ways until the pod's side ends it.
async fn connect(
    dial: Dial,
    port: u16,
    data: u8,
    framing: Framing,
    mut from_client: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<Message>,
    pod: String,
) {
    let (mut reader, mut writer) = match dial(port).await {
        Ok(halves) => halves,
        Err(err) => {
            let text = format!("error forwarding port {port} to pod {pod}: {err}");
            let _ = out.send(framing.encode(data + 1, text.as_bytes())).await;
            return;
        }
    };
    let to_pod = tokio::spawn(async move {
        while let Some(bytes) = from_client.recv().await {
            if writer.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                if out.send(framing.encode(data, &buf[..n])).await.is_err() {
                    break;
                }
            }
            Err(err) => {
                let text = format!("error forwarding port {port} to pod {pod}: {err}");
                let _ = out.send(framing.encode(data + 1, text.as_bytes())).await;
                break;
            }
        }
    }
    to_pod.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_is_chosen_when_nothing_is_offered_and_v5_is_passed_over() {
        assert_eq!(Framing::negotiate(&[]), Some((Framing::Binary, None)));
        // The Python client offers v5 first; v5 is for exec, not port-forward.
        assert_eq!(
            Framing::negotiate(&["v5.channel.k8s.io", "v4.channel.k8s.io"]),
            Some((Framing::Binary, Some(BINARY_PROTOCOL)))
        );
        assert_eq!(
            Framing::negotiate(&["v4.base64.channel.k8s.io"]),
            Some((Framing::Base64, Some(BASE64_PROTOCOL)))
        );
        assert_eq!(Framing::negotiate(&["v5.channel.k8s.io"]), None);
    }

    #[test]
    fn messages_carry_their_channel_first() {
        let m = Framing::Binary.encode(3, &8080u16.to_le_bytes());
        assert!(m.is_binary());
        assert_eq!(m.as_bytes(), [3, 0x90, 0x1f]);
        assert_eq!(Framing::Binary.decode(&m), Some((3, vec![0x90, 0x1f])));

        let m = Framing::Base64.encode(2, b"hello");
        assert!(m.is_text());
        assert_eq!(m.as_bytes(), b"2aGVsbG8=");
        assert_eq!(Framing::Base64.decode(&m), Some((2, b"hello".to_vec())));

        // What carries no channel's bytes is passed over.
        assert_eq!(Framing::Binary.decode(&Message::ping(Vec::new())), None);
        assert_eq!(Framing::Binary.decode(&Message::binary(Vec::new())), None);
        assert_eq!(
            Framing::Binary.decode(&Message::text("\u{0}abc")),
            Some((0, b"abc".to_vec()))
        );
        assert_eq!(Framing::Base64.decode(&Message::text("0!!")), None);
        assert_eq!(Framing::Base64.decode(&Message::text("x")), None);
    }

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn ports_come_from_port_and_ports_in_order() {
        assert_eq!(
            ports(&query(&[
                ("ports", "8080,9090"),
                ("port", "53"),
                ("x", "1")
            ])),
            Ok(vec![8080, 9090, 53])
        );
        assert_eq!(
            ports(&query(&[])),
            Err("at least 1 port must be specified".into())
        );
        assert!(ports(&query(&[("port", "0")])).unwrap_err().contains("> 0"));
        assert!(ports(&query(&[("port", "http")])).is_err());
        assert!(ports(&query(&[("port", "70000")])).is_err());
        assert!(ports(&query(&[("ports", "80,80")])).is_err());
    }
}
