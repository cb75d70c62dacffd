//! What the relays in front of a test server share (`tls_front`, `buffering_proxy`): a listener
//! on 127.0.0.1:0 on a thread of its own, living as long as the test process, that hands each
//! accepted connection to `handle` as a task of its own.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

/// Binds 127.0.0.1:0 on a new thread and returns its address once known.
pub fn listen_on_thread<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            while let Ok((conn, _)) = listener.accept().await {
                let _ = conn.set_nodelay(true);
                tokio::task::spawn_local(handle(conn));
            }
        })
    });
    addr_rx.recv().unwrap()
}
