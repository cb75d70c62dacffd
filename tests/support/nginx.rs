//! A real nginx (Debian's package, 1.22 here and in CI) in front of a test server, as production
//! endpoints sit behind one: started by the test with a config of its own in a temporary
//! folder (its prefix, pid file, error log and temp paths there; `daemon off`, one process,
//! `master_process off`), listening on 127.0.0.1 at a port the kernel chose (bound, freed, then
//! given to nginx, as the suite does for every server that takes its port as a setting; taken
//! by someone else in between, nginx is started again on another). Plain or TLS (a certificate
//! made with `openssl req -x509`, or one signed by a CA made the same way), `proxy_buffering`
//! on or off, `proxy_read_timeout` as given. Killed when dropped.
//!
//! nginx is `$LLMSPEED_NGINX`, else `/usr/sbin/nginx`, else `nginx` on the PATH. Missing: a
//! failure under `CI=true` (`.ci/run` installs it), elsewhere a loud "NOT RUN".
#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The certificate nginx serves over TLS.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cert {
    /// `openssl req -x509`: a certificate for 127.0.0.1 that is its own CA (users' usual kind).
    SelfSigned,
    /// A certificate for 127.0.0.1 signed by a CA made with `openssl req -x509`.
    CaSigned,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub buffering: bool,
    pub tls: Option<Cert>,
    /// `proxy_read_timeout`, ms (nginx's default is 60 s).
    pub read_timeout_ms: Option<u64>,
}

impl Config {
    pub fn plain(buffering: bool) -> Config {
        Config {
            buffering,
            tls: None,
            read_timeout_ms: None,
        }
    }

    pub fn tls(buffering: bool, cert: Cert) -> Config {
        Config {
            tls: Some(cert),
            ..Config::plain(buffering)
        }
    }
}

pub struct Nginx {
    pub port: u16,
    cfg: Config,
    child: Child,
    dir: tempfile::TempDir,
}

/// The nginx binary, or `None` (after the missing-component rule) when there is none.
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LLMSPEED_NGINX") {
        return Some(PathBuf::from(p));
    }
    let debian = Path::new("/usr/sbin/nginx");
    if debian.exists() {
        return Some(debian.to_path_buf());
    }
    let on_path = Command::new("nginx")
        .arg("-v")
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if on_path {
        return Some(PathBuf::from("nginx"));
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "CI=true: no nginx (install Debian's `nginx`, as .ci/run does, or set LLMSPEED_NGINX)"
        );
    }
    eprintln!("NOT RUN: no nginx (install Debian's `nginx` or set LLMSPEED_NGINX)");
    None
}

impl Nginx {
    /// nginx in front of `backend` (plain HTTP/1.1 to it, keep-alive); `None` without nginx.
    pub fn start(backend: SocketAddr, cfg: Config) -> Option<Nginx> {
        let bin = binary()?;
        let dir = tempfile::tempdir().expect("a temporary folder");
        if let Some(cert) = cfg.tls {
            make_certs(dir.path(), cert);
        }
        for attempt in 0..3 {
            let port = free_port();
            let conf = dir.path().join("nginx.conf");
            std::fs::write(&conf, config(dir.path(), port, backend, &cfg)).unwrap();
            let mut child = Command::new(&bin)
                .arg("-e")
                .arg(dir.path().join("error.log"))
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    let log =
                        std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
                    if log.contains("Address already in use") && attempt < 2 {
                        break;
                    }
                    panic!("nginx ended at start:\n{log}");
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Some(Nginx {
                        port,
                        cfg,
                        child,
                        dir,
                    });
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("nginx did not listen on 127.0.0.1:{port} within 20 s");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        unreachable!("three attempts, the last one returns or panics")
    }

    /// `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        let scheme = if self.cfg.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The file a user gives as `--ca-cert`: the certificate itself (self-signed) or its CA.
    pub fn ca_file(&self) -> PathBuf {
        match self.cfg.tls {
            Some(Cert::CaSigned) => self.dir.path().join("ca.pem"),
            _ => self.dir.path().join("cert.pem"),
        }
    }

    /// A CA that signed nothing nginx serves (`openssl req -x509` too): the wrong `--ca-cert`.
    pub fn other_ca(&self) -> PathBuf {
        let out = self.dir.path().join("other.pem");
        openssl_self_signed(
            &self.dir.path().join("other.key"),
            &out,
            "/CN=127.0.0.1",
            true,
        );
        out
    }

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

fn config(dir: &Path, port: u16, backend: SocketAddr, cfg: &Config) -> String {
    let d = dir.display();
    let (listen, certs) = match cfg.tls {
        None => (String::new(), String::new()),
        Some(_) => (
            " ssl".to_string(),
            format!("ssl_certificate {d}/chain.pem;\n    ssl_certificate_key {d}/cert.key;"),
        ),
    };
    let buffering = if cfg.buffering { "on" } else { "off" };
    let timeout = cfg
        .read_timeout_ms
        .map_or(String::new(), |ms| format!("proxy_read_timeout {ms}ms;"));
    // One process: its event loop is the proxy's only thread, as one nginx worker is. No
    // temp files: a response larger than the buffers waits for the client instead.
    format!(
        "daemon off;
master_process off;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream engine {{ server {backend}; keepalive 512; }}
  server {{
    listen 127.0.0.1:{port}{listen};
    {certs}
    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_buffering {buffering};
      proxy_max_temp_file_size 0;
      {timeout}
    }}
  }}
}}
"
    )
}

/// `cert.key` and `chain.pem` (what nginx serves) in `dir`, and `cert.pem` (self-signed) or
/// `ca.pem` (the CA that signed it), all with the `openssl` command as users make them.
fn make_certs(dir: &Path, cert: Cert) {
    let key = dir.join("cert.key");
    match cert {
        Cert::SelfSigned => {
            let pem = dir.join("cert.pem");
            openssl_self_signed(&key, &pem, "/CN=127.0.0.1", false);
            std::fs::copy(&pem, dir.join("chain.pem")).unwrap();
        }
        Cert::CaSigned => {
            let (ca_key, ca) = (dir.join("ca.key"), dir.join("ca.pem"));
            openssl_self_signed(&ca_key, &ca, "/CN=llmspeed test CA", true);
            let csr = dir.join("cert.csr");
            openssl(&[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                s(&key),
                "-out",
                s(&csr),
                "-subj",
                "/CN=127.0.0.1",
            ]);
            let ext = dir.join("ext.cnf");
            std::fs::write(
                &ext,
                "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
            )
            .unwrap();
            let pem = dir.join("cert.pem");
            openssl(&[
                "x509",
                "-req",
                "-in",
                s(&csr),
                "-CA",
                s(&ca),
                "-CAkey",
                s(&ca_key),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                s(&ext),
                "-out",
                s(&pem),
            ]);
            std::fs::copy(&pem, dir.join("chain.pem")).unwrap();
        }
    }
}

/// `openssl req -x509` (EC P-256, two days, SAN IP:127.0.0.1 unless `ca_only`).
fn openssl_self_signed(key: &Path, pem: &Path, subject: &str, ca_only: bool) {
    let mut args = vec![
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "2",
        "-keyout",
        s(key),
        "-out",
        s(pem),
        "-subj",
        subject,
    ];
    if !ca_only {
        args.extend(["-addext", "subjectAltName=IP:127.0.0.1"]);
    }
    openssl(&args);
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (Debian's `openssl`): {e}"));
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}
