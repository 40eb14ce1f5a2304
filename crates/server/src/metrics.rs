//! The Prometheus endpoint (`--metrics-port`): every numeric INFO figure as a gauge, and the
//! per-command figures (calls, time, errors, latency percentiles) as labelled series, encoded
//! with the Prometheus project's own client crate.
//!
//! It reads the node's INFO text under the host lock, once per scrape, so what it exports is
//! exactly what `INFO everything` answers at that moment (the same figures, the same names,
//! with a `lattice_` prefix); nothing is counted twice in the server.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::host::Shared;

/// A request larger than this is refused: the endpoint answers one short GET.
const MAX_REQUEST_BYTES: usize = 8 * 1024;

type Labels = Vec<(String, String)>;

/// Serves `GET /metrics` on `addr` until the process ends.
pub async fn serve(shared: Arc<Shared>, addr: String) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
    tracing::info!("metrics: http://{addr}/metrics");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(answer(shared.clone(), stream));
        }
    });
    Ok(())
}

async fn answer(shared: Arc<Shared>, mut stream: tokio::net::TcpStream) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
        if request.len() > MAX_REQUEST_BYTES {
            let _ = stream
                .write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
            return;
        }
    }
    let (status, body) = if request.starts_with(b"GET /metrics ") || request.starts_with(b"GET / ")
    {
        let info = shared.host.lock().node().info_everything();
        ("200 OK", render(&info))
    } else {
        ("404 Not Found", "only GET /metrics is served\n".to_string())
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
}

/// The Prometheus text for an INFO text: `name:number` lines become gauges `lattice_<name>`;
/// `cmdstat_<cmd>` and `latency_percentiles_usec_<cmd>` lines become labelled series;
/// `errorstat_<code>` a labelled counter. Other lines (text values) are left out.
pub fn render(info: &str) -> String {
    let mut registry = Registry::with_prefix("lattice");
    let calls = Family::<Labels, Counter>::default();
    let usec = Family::<Labels, Counter>::default();
    let rejected = Family::<Labels, Counter>::default();
    let failed = Family::<Labels, Counter>::default();
    let latency = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let errors = Family::<Labels, Counter>::default();
    let mut section = String::new();
    for line in info.lines() {
        if let Some(name) = line.strip_prefix("# ") {
            section = name.to_ascii_lowercase();
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if let Some(cmd) = key.strip_prefix("cmdstat_") {
            let labels = vec![("command".to_string(), cmd.to_string())];
            for (field, v) in fields(value) {
                let family = match field {
                    "calls" => &calls,
                    "usec" => &usec,
                    "rejected_calls" => &rejected,
                    "failed_calls" => &failed,
                    _ => continue,
                };
                family.get_or_create(&labels).inc_by(v as u64);
            }
        } else if let Some(cmd) = key.strip_prefix("latency_percentiles_usec_") {
            for (p, v) in fields(value) {
                let quantile = p.trim_start_matches('p').parse::<f64>().unwrap_or(0.0) / 100.0;
                latency
                    .get_or_create(&vec![
                        ("command".to_string(), cmd.to_string()),
                        ("quantile".to_string(), quantile.to_string()),
                    ])
                    .set(v);
            }
        } else if let Some(code) = key.strip_prefix("errorstat_") {
            if let Some((_, n)) = fields(value).next() {
                errors
                    .get_or_create(&vec![("error".to_string(), code.to_string())])
                    .inc_by(n as u64);
            }
        } else if let Ok(v) = value.trim().parse::<f64>() {
            let gauge = Gauge::<f64, AtomicU64>::default();
            gauge.set(v);
            let help = format!("INFO {section} {key}");
            registry.register(metric_name(key), help, gauge);
        }
    }
    registry.register(
        "command_calls",
        "Calls per command (INFO commandstats)",
        calls,
    );
    registry.register(
        "command_usec",
        "Microseconds spent per command (INFO commandstats)",
        usec,
    );
    registry.register(
        "command_rejected_calls",
        "Calls refused before running (INFO commandstats)",
        rejected,
    );
    registry.register(
        "command_failed_calls",
        "Calls that answered an error (INFO commandstats)",
        failed,
    );
    registry.register(
        "command_latency_usec",
        "Per-command latency percentiles in microseconds (INFO latencystats)",
        latency,
    );
    registry.register(
        "errors",
        "Error replies per error code (INFO errorstats)",
        errors,
    );
    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// `a=1,b=2.5` as (name, number) pairs; fields that are not numbers are skipped.
fn fields(value: &str) -> impl Iterator<Item = (&str, f64)> {
    value.split(',').filter_map(|f| {
        let (k, v) = f.split_once('=')?;
        Some((k, v.parse().ok()?))
    })
}

/// A Prometheus metric name from an INFO key (letters, digits and underscores).
fn metric_name(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn info_figures_become_series() {
        let info = "# Clients\r\nconnected_clients:3\r\nrole:master\r\n\r\n# Commandstats\r\ncmdstat_get:calls=7,usec=21,usec_per_call=3.00,rejected_calls=0,failed_calls=1\r\n# Latencystats\r\nlatency_percentiles_usec_get:p50=1.003,p99=4.015,p99.9=9.023\r\n# Errorstats\r\nerrorstat_ERR:count=2\r\n";
        let text = render(info);
        assert!(text.contains("lattice_connected_clients 3.0"), "{text}");
        assert!(!text.contains("role"), "{text}");
        assert!(
            text.contains("lattice_command_calls_total{command=\"get\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("lattice_command_failed_calls_total{command=\"get\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("lattice_command_latency_usec{command=\"get\",quantile=\"0.99\"} 4.015"),
            "{text}"
        );
        assert!(
            text.contains("lattice_errors_total{error=\"ERR\"} 2"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
