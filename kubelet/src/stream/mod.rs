//! Streaming sessions of the kubelet's server: `kubectl exec` (and attach) over WebSocket.
//!
//! [`channel`] is the wire format, pure. [`run`] drives one session: it starts the command when
//! the upgrade completed, copies stdin and resize messages in and stdout/stderr out, ends with the
//! exit `Status` on the error channel and a normal Close, and kills the command when the client
//! goes away first (the [`Session`]'s guard). [`portforward`] serves `kubectl port-forward`,
//! [`port_channels`] the WebSocket port-forward of client libraries.
//! [`remote`] is the client side of the same protocols, for runtimes that stream from a server of
//! their own (CRI).

pub mod channel;
pub mod port_channels;
pub mod portforward;
pub mod remote;
pub mod spdy;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use warp::ws::{Message, WebSocket};

use crate::runtime::{Session, StreamReader, StreamWriter};
use channel::{Inbound, Protocol};

/// Bytes read from a command's output per message.
const CHUNK: usize = 32 * 1024;

/// Stdin messages queued for the command before the reader waits (back-pressure on the
/// client while the command does not read).
const STDIN_QUEUE: usize = 16;

/// How long the output still flows after the command exited (a child that left the process
/// group may hold the pipe open).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Drives one exec session over `ws` speaking `protocol`; `start` starts the command (after the
/// upgrade, so that a command that cannot start is reported on the error channel).
pub async fn run<F>(ws: WebSocket, protocol: Protocol, start: F)
where
    F: std::future::Future<Output = crate::runtime::Result<Session>>,
{
    let (mut sink, mut inbound) = ws.split();
    let session = match start.await {
        Ok(session) => session,
        Err(err) => {
            let status = channel::failure_status(&err.to_string());
            let _ = sink
                .send(Message::binary(channel::encode(
                    channel::ERROR,
                    status.to_string().as_bytes(),
                )))
                .await;
            let _ = sink.send(Message::close_with(1000u16, "")).await;
            return;
        }
    };
    let Session {
        stdin,
        stdout,
        stderr,
        resize,
        exit,
        guard,
    } = session;

    // Everything to the client goes through one writer task.
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(32);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            let close = message.is_close();
            if sink.send(message).await.is_err() {
                return;
            }
            if close {
                let _ = sink.flush().await;
                return;
            }
        }
    });
    let pumps: Vec<_> = [(channel::STDOUT, stdout), (channel::STDERR, stderr)]
        .into_iter()
        .filter_map(|(ch, reader)| reader.map(|r| tokio::spawn(pump(ch, r, out_tx.clone()))))
        .collect();
    let mut stdin_tx = stdin.map(|writer| {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(STDIN_QUEUE);
        tokio::spawn(feed(writer, rx));
        tx
    });
    let mut resize_buf = Vec::new();
    let mut exit = exit;
    let code = loop {
        tokio::select! {
            code = &mut exit => break Some(code),
            message = inbound.next() => {
                let Some(Ok(message)) = message else {
                    // The client went away (or broke the protocol): end the command.
                    break None;
                };
                if message.is_close() {
                    break None;
                }
                // Text frames carry channel bytes too: the Python client sends a `str` written
                // to stdin as one, and Kubernetes reads both kinds alike.
                if !message.is_binary() && !message.is_text() {
                    continue;
                }
                match channel::decode(protocol, message.as_bytes()) {
                    Ok(Inbound::Data(channel::STDIN, data)) => {
                        if let Some(tx) = &stdin_tx
                            && tx.send(data.to_vec()).await.is_err()
                        {
                            // The command closed its stdin; later input is dropped.
                            stdin_tx = None;
                        }
                    }
                    Ok(Inbound::Data(channel::RESIZE, data)) => {
                        resize_buf.extend_from_slice(data);
                        for (width, height) in channel::take_resizes(&mut resize_buf) {
                            if let Some(resize) = &resize {
                                resize(width, height);
                            }
                        }
                        if resize_buf.len() > 4096 {
                            resize_buf.clear();
                        }
                    }
                    Ok(Inbound::Close(channel::STDIN)) => stdin_tx = None,
                    Ok(_) => {}
                    Err(err) => {
                        tracing::debug!(%err, "exec stream: bad message, ending the session");
                        break None;
                    }
                }
            }
        }
    };
    drop(stdin_tx);
    let Some(code) = code else {
        // Dropping the guard kills the command's process group.
        drop(guard);
        drop(out_tx);
        writer.abort();
        return;
    };
    let _ = tokio::time::timeout(DRAIN, futures::future::join_all(pumps)).await;
    let status = match code {
        Ok(code) => channel::exit_status(code),
        Err(err) => channel::failure_status(&err.to_string()),
    };
    let _ = out_tx
        .send(Message::binary(channel::encode(
            channel::ERROR,
            status.to_string().as_bytes(),
        )))
        .await;
    let _ = out_tx.send(Message::close_with(1000u16, "")).await;
    drop(out_tx);
    let _ = writer.await;
    drop(guard);
    // Drain what the client still sends until it closes too (or a short while passes).
    let _ = tokio::time::timeout(DRAIN, async { while inbound.next().await.is_some() {} }).await;
}

/// Copies one output of the command to `channel` until it ends.
async fn pump(channel: u8, mut reader: StreamReader, out: mpsc::Sender<Message>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out
                    .send(Message::binary(channel::encode(channel, &buf[..n])))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Writes what the client sends on stdin to the command; closing the channel closes its stdin.
async fn feed(mut writer: StreamWriter, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(data) = rx.recv().await {
        if writer.write_all(&data).await.is_err() || writer.flush().await.is_err() {
            return;
        }
    }
    let _ = writer.shutdown().await;
}
