//! The object-store driver: the uploader's calls (`lattice_persist::Uploader`, which decides
//! what goes to the bucket and when) carried out with `aws-sdk-s3` on the tokio runtime, and an
//! empty data directory restored from the bucket before the node recovers it.
//!
//! Calls run one at a time on their own task, never under the node lock: a slow or absent S3
//! delays only the upload. Credentials come from the standard AWS chain (environment
//! variables, then the shared profile files, then the container and instance providers).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use bytes::Bytes;
use lattice_persist::{plan_restore, AckMode, ObjectReply, ObjectRequest, Start, MANIFEST_KEY};
use tokio::sync::Notify;

use crate::host::Shared;

/// The bucket settings (`--s3-*` flags or config keys).
#[derive(Clone, Debug)]
pub struct S3Settings {
    pub bucket: String,
    /// Prepended to every key; a `/` is added when missing.
    pub prefix: String,
    /// A non-AWS endpoint (an S3-compatible server); path-style addressing then.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub mode: AckMode,
}

/// A bucket and prefix with a client for them.
#[derive(Clone)]
pub struct Bucket {
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
}

fn describe<E: std::error::Error>(e: E) -> String {
    DisplayErrorContext(e).to_string()
}

impl Bucket {
    pub async fn connect(s: &S3Settings) -> Bucket {
        use aws_config::meta::region::RegionProviderChain;
        use aws_smithy_http_client::tls;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let region =
            RegionProviderChain::first_try(s.region.clone().map(aws_sdk_s3::config::Region::new))
                .or_default_provider()
                .or_else("us-east-1");
        let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(http)
            .region(region)
            .load()
            .await;
        let mut config = aws_sdk_s3::config::Builder::from(&shared);
        if let Some(endpoint) = &s.endpoint {
            config = config.endpoint_url(endpoint).force_path_style(true);
        }
        let mut prefix = s.prefix.clone();
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        Bucket {
            client: aws_sdk_s3::Client::from_conf(config.build()),
            bucket: s.bucket.clone(),
            prefix,
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<(), String> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.key(key))
            .body(ByteStream::from(data))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| format!("PUT {key}: {}", describe(e)))
    }

    /// The object, or None when there is no such key.
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.key(key))
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => return Err(format!("GET {key}: {}", describe(e))),
        };
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| format!("GET {key}: {}", describe(e)))?;
        Ok(Some(body.into_bytes().to_vec()))
    }

    /// Every key under the prefix, relative to it.
    async fn list(&self) -> Result<Vec<String>, String> {
        let mut keys = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&self.prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| format!("LIST {}: {}", self.prefix, describe(e)))?;
            for o in page.contents() {
                if let Some(k) = o.key().and_then(|k| k.strip_prefix(&self.prefix)) {
                    keys.push(k.to_string());
                }
            }
        }
        Ok(keys)
    }

    async fn delete(&self, keys: &[String]) -> Result<(), String> {
        if keys.is_empty() {
            return Ok(());
        }
        let objects = keys
            .iter()
            .map(|k| ObjectIdentifier::builder().key(self.key(k)).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let delete = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(|e| e.to_string())?;
        let out = self
            .client
            .delete_objects()
            .bucket(&self.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(|e| format!("DELETE {} keys: {}", keys.len(), describe(e)))?;
        match out.errors().first() {
            Some(e) => Err(format!(
                "DELETE {}: {}",
                e.key().unwrap_or("?"),
                e.message().unwrap_or("failed")
            )),
            None => Ok(()),
        }
    }

    /// Deletes the pieces among `pieces` holding records after `seq`: a restore whose recovery
    /// stopped early (at a resume point, §33) must not leave them to be confused with the
    /// pieces that will number the same records differently.
    pub async fn drop_pieces_after(&self, pieces: &[String], seq: u64) -> Result<(), String> {
        let beyond: Vec<String> = pieces
            .iter()
            .filter(|k| lattice_persist::parse_piece_key(k).is_some_and(|(_, last)| last > seq))
            .cloned()
            .collect();
        self.delete(&beyond).await
    }

    async fn perform(&self, request: ObjectRequest) -> Result<ObjectReply, String> {
        match request {
            ObjectRequest::Put { key, data } => {
                self.put(&key, data).await.map(|_| ObjectReply::Done)
            }
            ObjectRequest::List => self.list().await.map(ObjectReply::Keys),
            ObjectRequest::Delete { keys } => self.delete(&keys).await.map(|_| ObjectReply::Done),
        }
    }
}

/// Downloads a restore runs at once.
const RESTORE_PARALLEL_GETS: usize = 16;

/// What a restore fetched, for the start-up log line.
pub struct Restored {
    pub start: Start,
    /// The chain's pieces, for [`Bucket::drop_pieces_after`].
    pub pieces: Vec<String>,
    pub objects: usize,
    pub bytes: u64,
}

/// Restores an empty data directory from the bucket: the manifest, its snapshot and the
/// gapless chain of log pieces after it, written as the local files recovery reads. Pieces
/// beyond the chain (from a run whose chain never joined up) are removed from the bucket first.
/// An empty bucket restores nothing.
pub async fn restore(bucket: &Bucket, dir: &Path) -> Result<Restored, String> {
    let keys = bucket.list().await?;
    let manifest = if keys.iter().any(|k| k == MANIFEST_KEY) {
        bucket.get(MANIFEST_KEY).await?
    } else {
        None
    };
    let plan = plan_restore(&keys, manifest.as_deref())?;
    bucket.delete(&plan.stale).await?;
    let mut fetched = Vec::new();
    if let Some((_, key)) = &plan.snapshot {
        fetched.push((key.clone(), key.clone()));
    }
    fetched.extend(plan.pieces.iter().cloned());
    let write = |name: &str, data: &[u8]| -> Result<(), String> {
        use std::io::Write as _;
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        f.write_all(data)
            .and_then(|_| f.sync_data())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    // Many small pieces (one per round trip under `sync`): fetched several at a time.
    let mut bytes = 0u64;
    let mut pending = fetched.iter().cloned();
    let mut running = tokio::task::JoinSet::new();
    loop {
        while running.len() < RESTORE_PARALLEL_GETS {
            let Some((key, name)) = pending.next() else {
                break;
            };
            let b = bucket.clone();
            running.spawn(async move { (b.get(&key).await, key, name) });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        let (data, key, name) = done.map_err(|e| format!("a download task failed: {e}"))?;
        let data =
            data?.ok_or_else(|| format!("{key} vanished from the bucket during the restore"))?;
        bytes += data.len() as u64;
        write(&name, &data)?;
    }
    // The manifest last: without it a half-restored directory holds no snapshot to trust.
    if let Some(text) = &manifest {
        write("MANIFEST", text)?;
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
    Ok(Restored {
        pieces: plan.pieces.iter().map(|(k, _)| k.clone()).collect(),
        start: Start::Restored {
            base_seq: plan.snapshot.as_ref().map_or(0, |s| s.0),
            last_seq: plan.last_seq,
        },
        objects: fetched.len() + usize::from(manifest.is_some()),
        bytes,
    })
}

/// Carries out the uploader's calls, one at a time, until the process ends. `wake` is
/// notified when the node has something new to upload.
pub async fn run(shared: Arc<Shared>, bucket: Bucket, wake: Arc<Notify>) {
    loop {
        let (call, wait) = {
            let mut host = shared.host.lock();
            let now = host.now();
            let call = host.poll_upload(now);
            host.drain(None, &mut Vec::new(), None);
            shared.check_timer(&mut host, None);
            let wait_us = host
                .upload_timeout()
                .map_or(1_000_000, |t| t.saturating_sub(now.0));
            (call, Duration::from_micros(wait_us.clamp(1_000, 1_000_000)))
        };
        let Some(call) = call else {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            continue;
        };
        let timeout = Duration::from_micros(call.timeout_us);
        let result = match tokio::time::timeout(timeout, bucket.perform(call.request)).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer in {} ms", timeout.as_millis())),
        };
        let mut host = shared.host.lock();
        host.upload_done(call.id, result);
        host.drain(None, &mut Vec::new(), None);
        shared.check_timer(&mut host, None);
    }
}
