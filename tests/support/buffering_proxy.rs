//! A buffering proxy in front of a plain server, as nginx with `proxy_buffering on` is: each
//! connection is relayed to the backend, the requests at once, the responses held and written
//! on in one write every `period` (so several tokens share a TCP segment, while the client
//! reads each segment as it comes). On a thread of its own that lives as long as the test.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct BufferingProxy {
    pub addr: SocketAddr,
}

impl BufferingProxy {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn start(backend: SocketAddr, period: Duration) -> BufferingProxy {
        BufferingProxy {
            addr: super::relay::listen_on_thread(move |client| relay(client, backend, period)),
        }
    }
}

async fn relay(client: TcpStream, backend: SocketAddr, period: Duration) {
    let Ok(server) = TcpStream::connect(backend).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_rx, &mut server_tx).await;
        let _ = server_tx.shutdown().await;
    });
    let mut held = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            n = server_rx.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => held.extend_from_slice(&buf[..n]),
            },
            _ = tick.tick() => {
                if !held.is_empty() && client_tx.write_all(&held).await.is_err() {
                    return;
                }
                held.clear();
            }
        }
    }
    let _ = client_tx.write_all(&held).await;
    let _ = client_tx.shutdown().await;
}
