//! A TCP proxy on loopback that can drop every open connection at once, like a network that
//! fails: the tests put it between a client (the browser) and turnkey to prove that the client
//! reconnects and resumes where it was. It records what clients sent, so a test can read the
//! requests (e.g. which `since=` a reconnect asked for).
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What one client connection sent, in order.
#[derive(Clone, Debug, Default)]
struct Recorded {
    sent: Vec<String>,
}

pub struct CutProxy {
    /// `http://127.0.0.1:PORT` of the proxy.
    pub url: String,
    target: Arc<Mutex<SocketAddr>>,
    cuts: watch::Sender<u64>,
    recorded: Arc<Mutex<Recorded>>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// Forwards connections to `target` (`http://127.0.0.1:PORT`) until dropped.
    pub async fn start(target: &str) -> Self {
        let target = Arc::new(Mutex::new(parse_target(target)));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("cut proxy bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("cut proxy address: {e}"));
        let cuts = watch::channel(0).0;
        let recorded = Arc::new(Mutex::new(Recorded::default()));
        let task = tokio::spawn(accept(
            listener,
            target.clone(),
            cuts.clone(),
            recorded.clone(),
        ));
        Self {
            url: format!("http://{addr}"),
            target,
            cuts,
            recorded,
            task,
        }
    }

    /// Drops every connection open now; later ones are forwarded as before.
    pub fn cut_all(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Sends later connections to `target` instead (a restarted server on another port).
    pub fn retarget(&self, target: &str) {
        if let Ok(mut t) = self.target.lock() {
            *t = parse_target(target);
        }
    }

    /// Every chunk clients sent so far, each connection's chunks joined, in accept order.
    pub fn client_bytes(&self) -> Vec<String> {
        self.recorded
            .lock()
            .map(|r| r.sent.clone())
            .unwrap_or_default()
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut_all();
        self.task.abort();
    }
}

fn parse_target(target: &str) -> SocketAddr {
    target
        .trim_start_matches("http://")
        .parse()
        .unwrap_or_else(|e| panic!("cut proxy target {target}: {e}"))
}

async fn accept(
    listener: TcpListener,
    target: Arc<Mutex<SocketAddr>>,
    cuts: watch::Sender<u64>,
    recorded: Arc<Mutex<Recorded>>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let Ok(to) = target.lock().map(|t| *t) else {
            return;
        };
        let index = match recorded.lock() {
            Ok(mut r) => {
                r.sent.push(String::new());
                r.sent.len() - 1
            }
            Err(_) => return,
        };
        tokio::spawn(pipe(client, to, cuts.subscribe(), recorded.clone(), index));
    }
}

/// Copies both ways until either side closes or a cut comes.
async fn pipe(
    mut client: TcpStream,
    target: SocketAddr,
    mut cut: watch::Receiver<u64>,
    recorded: Arc<Mutex<Recorded>>,
    index: usize,
) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let up = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = cr.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            if let Ok(mut r) = recorded.lock() {
                if let Some(s) = r.sent.get_mut(index) {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = tokio::io::copy(&mut sr, &mut cw);
    tokio::select! {
        () = up => {}
        _ = down => {}
        _ = cut.changed() => {}
    }
    // Dropping both sockets closes the connection on both sides.
}
