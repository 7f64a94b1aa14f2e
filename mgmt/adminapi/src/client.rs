//! The typed client: one method per route, each answering the route's type or an
//! [`AdminError`] that says what kind of failure it was.

use crate::{
    routes, BucketView, ClusterStatus, DeleteTenant, ErrorBody, ErrorKind, ExportSpec, ExportView,
    GcRunQuery, GcStatus, InitRequest, JoinRequest, KeyView, NewKey, NewSnapshot, NewTenant,
    NewUser, NodeDrives, NodeRequest, NodeStatus, QosSpec, QuotaSpec, ReplicationSpec,
    ReplicationView, ScrubStatus, SetDisabled, SnapshotView, SnapshotsView, TenantView, TokenReply,
    UserView,
};
use cairn_credentials::CredentialError;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use std::path::Path;
use std::time::Duration;

/// How long a call may take unless [`AdminClient::with_timeout`] says otherwise:
/// a join waits up to a minute for the map that lists the new member.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);

/// Why a call failed. Answers the server gave carry its [`ErrorBody`] as their
/// source; the rest carry the underlying error.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The admin token could not be read.
    #[error("{source}")]
    Token {
        #[source]
        source: CredentialError,
    },
    /// The TLS material given (CA, certificate, key) is not usable.
    #[error("{what}: {detail}")]
    Tls { what: String, detail: String },
    /// 401 or 403: the token is missing or wrong, or the route is not the
    /// caller's.
    #[error("{url}: {status}: {source}")]
    Unauthorized {
        url: String,
        status: StatusCode,
        #[source]
        source: ErrorBody,
    },
    /// 404: no such node (or no such route: an older mgmtd).
    #[error("{url}: {status}: {source}")]
    NotFound {
        url: String,
        status: StatusCode,
        #[source]
        source: ErrorBody,
    },
    /// 400 or 409: the request is wrong, or refused in the node's present state.
    /// Asking again the same way fails the same way.
    #[error("{url}: {status}: {source}")]
    Rejected {
        url: String,
        status: StatusCode,
        #[source]
        source: ErrorBody,
    },
    /// 503 (or a gateway's 502, 504): not now; asking again later may succeed.
    #[error("{url}: {status}: {source}")]
    Unavailable {
        url: String,
        status: StatusCode,
        #[source]
        source: ErrorBody,
    },
    /// 500 or another status: the node failed; its log says more.
    #[error("{url}: {status}: {source}")]
    Server {
        url: String,
        status: StatusCode,
        #[source]
        source: ErrorBody,
    },
    /// No answer: the connection was refused or cut, or the call timed out.
    #[error("{url}: {detail}")]
    Transport {
        url: String,
        /// The error with its causes, on one line (the cause is often two levels
        /// down: "connection refused").
        detail: String,
        #[source]
        source: reqwest::Error,
    },
    /// An answer that does not read as the route's reply.
    #[error("{url}: bad response: {source}")]
    Decode {
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

impl AdminError {
    /// The server's word for what failed, when it answered.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            AdminError::Unauthorized { source, .. }
            | AdminError::NotFound { source, .. }
            | AdminError::Rejected { source, .. }
            | AdminError::Unavailable { source, .. }
            | AdminError::Server { source, .. } => Some(source.kind),
            AdminError::Token { .. }
            | AdminError::Tls { .. }
            | AdminError::Transport { .. }
            | AdminError::Decode { .. } => None,
        }
    }

    /// Asking again later may succeed: the node was unavailable or unreachable.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            AdminError::Unavailable { .. } | AdminError::Transport { .. }
        )
    }

    /// A failed answer, classified by the body's kind.
    fn answered(url: String, status: StatusCode, body: ErrorBody) -> AdminError {
        let source = body;
        match source.kind {
            ErrorKind::Unauthorized | ErrorKind::Forbidden => AdminError::Unauthorized {
                url,
                status,
                source,
            },
            ErrorKind::NotFound => AdminError::NotFound {
                url,
                status,
                source,
            },
            ErrorKind::Invalid | ErrorKind::Conflict => AdminError::Rejected {
                url,
                status,
                source,
            },
            ErrorKind::Unavailable => AdminError::Unavailable {
                url,
                status,
                source,
            },
            ErrorKind::Internal => AdminError::Server {
                url,
                status,
                source,
            },
        }
    }
}

/// A node's admin API: where it is and the token it wants.
#[derive(Clone)]
pub struct AdminClient {
    /// `http://host:port`, no trailing slash.
    base: String,
    token: String,
    timeout: Duration,
    http: reqwest::Client,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminClient({}, <token>)", self.base)
    }
}

impl AdminClient {
    /// The admin API at `addr` (`host:port`, or an `http://` URL) with `token`.
    pub fn new(addr: &str, token: impl Into<String>) -> AdminClient {
        let addr = addr.trim().trim_end_matches('/');
        let base = if addr.starts_with("http://") || addr.starts_with("https://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        AdminClient {
            base,
            token: token.into(),
            timeout: DEFAULT_TIMEOUT,
            http: reqwest::Client::new(),
        }
    }

    /// The admin API at `addr` with the token in `token_file`.
    pub fn from_token_file(addr: &str, token_file: &Path) -> Result<AdminClient, AdminError> {
        let token = cairn_credentials::read_token_file(token_file)
            .map_err(|source| AdminError::Token { source })?;
        Ok(AdminClient::new(addr, token))
    }

    /// The admin API at `addr` of the node whose state directory is `state_dir`
    /// (its token is `state_dir/admin.token`).
    pub fn for_state_dir(addr: &str, state_dir: &Path) -> Result<AdminClient, AdminError> {
        let token = cairn_credentials::read_admin_token(state_dir)
            .map_err(|source| AdminError::Token { source })?;
        Ok(AdminClient::new(addr, token))
    }

    /// Over TLS (`https://` addresses): trusts only the cluster CA in `ca_pem`,
    /// and presents the admin certificate and key (PEM) when given, in which
    /// case no token is needed (an empty one sends none).
    pub fn with_tls(
        mut self,
        ca_pem: &[u8],
        identity: Option<(&[u8], &[u8])>,
    ) -> Result<AdminClient, AdminError> {
        let tls_err = |what: &str, e: reqwest::Error| AdminError::Tls {
            what: what.to_string(),
            detail: chain(&e),
        };
        let ca = reqwest::Certificate::from_pem(ca_pem).map_err(|e| tls_err("cluster CA", e))?;
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca);
        if let Some((cert, key)) = identity {
            let mut pem = cert.to_vec();
            pem.push(b'\n');
            pem.extend_from_slice(key);
            let id =
                reqwest::Identity::from_pem(&pem).map_err(|e| tls_err("admin certificate", e))?;
            b = b.identity(id);
        }
        self.http = b.build().map_err(|e| tls_err("TLS client", e))?;
        Ok(self)
    }

    /// Each call gives up after `timeout` (default 90 s).
    pub fn with_timeout(mut self, timeout: Duration) -> AdminClient {
        self.timeout = timeout;
        self
    }

    /// `http://host:port`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `GET /healthz`: mgmtd serves.
    pub async fn healthz(&self) -> Result<(), AdminError> {
        self.send(Method::GET, routes::HEALTHZ, |r| r)
            .await
            .map(drop)
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> Result<NodeStatus, AdminError> {
        self.call(Method::GET, routes::STATUS, |r| r).await
    }

    /// `GET /v1/drives`.
    pub async fn drives(&self) -> Result<NodeDrives, AdminError> {
        self.call(Method::GET, routes::DRIVES, |r| r).await
    }

    /// `GET /v1/scrub`.
    pub async fn scrub_status(&self) -> Result<ScrubStatus, AdminError> {
        self.call(Method::GET, routes::SCRUB, |r| r).await
    }

    /// `POST /v1/scrub/start`: a pass now, or the paused one resumed.
    pub async fn scrub_start(&self) -> Result<ScrubStatus, AdminError> {
        self.call(Method::POST, routes::SCRUB_START, |r| r).await
    }

    /// `POST /v1/scrub/pause`.
    pub async fn scrub_pause(&self) -> Result<ScrubStatus, AdminError> {
        self.call(Method::POST, routes::SCRUB_PAUSE, |r| r).await
    }

    /// `GET /v1/gc`.
    pub async fn gc_status(&self) -> Result<GcStatus, AdminError> {
        self.call(Method::GET, routes::GC, |r| r).await
    }

    /// `POST /v1/gc/run`: starts a round in the background; answers the status
    /// from before it.
    pub async fn gc_run(&self, query: GcRunQuery) -> Result<GcStatus, AdminError> {
        self.call(Method::POST, routes::GC_RUN, |r| r.query(&query))
            .await
    }

    /// `POST /v1/cluster/init`.
    pub async fn cluster_init(&self, req: &InitRequest) -> Result<TokenReply, AdminError> {
        self.call(Method::POST, routes::CLUSTER_INIT, |r| r.json(req))
            .await
    }

    /// `POST /v1/cluster/join`: answers once this node is in the map.
    pub async fn cluster_join(&self, req: &JoinRequest) -> Result<TokenReply, AdminError> {
        self.call(Method::POST, routes::CLUSTER_JOIN, |r| r.json(req))
            .await
    }

    /// `GET /v1/cluster/status`.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, AdminError> {
        self.call(Method::GET, routes::CLUSTER_STATUS, |r| r).await
    }

    /// `GET /v1/cluster/token`.
    pub async fn cluster_token(&self) -> Result<TokenReply, AdminError> {
        self.call(Method::GET, routes::CLUSTER_TOKEN, |r| r).await
    }

    /// `POST /v1/cluster/drain`: the map epoch that drains the node.
    pub async fn cluster_drain(&self, req: &NodeRequest) -> Result<u64, AdminError> {
        self.call(Method::POST, routes::CLUSTER_DRAIN, |r| r.json(req))
            .await
    }

    /// `POST /v1/cluster/remove`.
    pub async fn cluster_remove(&self, req: &NodeRequest) -> Result<(), AdminError> {
        let _: bool = self
            .call(Method::POST, routes::CLUSTER_REMOVE, |r| r.json(req))
            .await?;
        Ok(())
    }

    /// `GET /v1/tenants`.
    pub async fn tenants(&self) -> Result<Vec<TenantView>, AdminError> {
        self.call(Method::GET, routes::TENANTS, |r| r).await
    }

    /// `POST /v1/tenants`.
    pub async fn tenant_create(
        &self,
        name: &str,
        encrypted: bool,
    ) -> Result<TenantView, AdminError> {
        let req = NewTenant {
            name: name.into(),
            encrypted,
        };
        self.call(Method::POST, routes::TENANTS, |r| r.json(&req))
            .await
    }

    /// `GET /v1/tenants/{tenant}` (by name or hex id).
    pub async fn tenant(&self, tenant: &str) -> Result<TenantView, AdminError> {
        let route = routes::fill(routes::TENANT, &[tenant]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `PATCH /v1/tenants/{tenant}`.
    pub async fn tenant_set_disabled(
        &self,
        tenant: &str,
        disabled: bool,
    ) -> Result<TenantView, AdminError> {
        let route = routes::fill(routes::TENANT, &[tenant]);
        self.call(Method::PATCH, &route, |r| r.json(&SetDisabled { disabled }))
            .await
    }

    /// `DELETE /v1/tenants/{tenant}` (`?purge=true`: with its buckets and data).
    pub async fn tenant_delete(&self, tenant: &str, purge: bool) -> Result<(), AdminError> {
        let route = routes::fill(routes::TENANT, &[tenant]);
        let q = DeleteTenant { purge };
        let _: bool = self.call(Method::DELETE, &route, |r| r.query(&q)).await?;
        Ok(())
    }

    /// `GET /v1/tenants/{tenant}/users`.
    pub async fn users(&self, tenant: &str) -> Result<Vec<UserView>, AdminError> {
        let route = routes::fill(routes::USERS, &[tenant]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `POST /v1/tenants/{tenant}/users`.
    pub async fn user_create(
        &self,
        tenant: &str,
        name: &str,
        role: &str,
    ) -> Result<UserView, AdminError> {
        let route = routes::fill(routes::USERS, &[tenant]);
        let req = NewUser {
            name: name.into(),
            role: role.into(),
        };
        self.call(Method::POST, &route, |r| r.json(&req)).await
    }

    /// `PATCH /v1/tenants/{tenant}/users/{user}`.
    pub async fn user_set_disabled(
        &self,
        tenant: &str,
        user: &str,
        disabled: bool,
    ) -> Result<UserView, AdminError> {
        let route = routes::fill(routes::USER, &[tenant, user]);
        self.call(Method::PATCH, &route, |r| r.json(&SetDisabled { disabled }))
            .await
    }

    /// `DELETE /v1/tenants/{tenant}/users/{user}`.
    pub async fn user_delete(&self, tenant: &str, user: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::USER, &[tenant, user]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `POST /v1/tenants/{tenant}/users/{user}/keys`: the secret is in this answer
    /// only.
    pub async fn key_create(&self, tenant: &str, user: &str) -> Result<NewKey, AdminError> {
        let route = routes::fill(routes::USER_KEYS, &[tenant, user]);
        self.call(Method::POST, &route, |r| r).await
    }

    /// `GET /v1/tenants/{tenant}/keys`.
    pub async fn keys(&self, tenant: &str) -> Result<Vec<KeyView>, AdminError> {
        let route = routes::fill(routes::KEYS, &[tenant]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `DELETE /v1/keys/{access_key}`.
    pub async fn key_revoke(&self, access_key: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::KEY, &[access_key]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/admin/tokens`.
    pub async fn admin_tokens(&self) -> Result<Vec<crate::AdminTokenView>, AdminError> {
        self.call(Method::GET, routes::ADMIN_TOKENS, |r| r).await
    }

    /// `POST /v1/admin/tokens`: the token is in the answer, this once.
    pub async fn admin_token_create(
        &self,
        t: &crate::NewAdminToken,
    ) -> Result<crate::CreatedAdminToken, AdminError> {
        self.call(Method::POST, routes::ADMIN_TOKENS, |r| r.json(t))
            .await
    }

    /// `DELETE /v1/admin/tokens/{id}`.
    pub async fn admin_token_revoke(&self, id: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::ADMIN_TOKEN, &[id]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/audit`: the newest `limit` entries, oldest first.
    pub async fn audit(&self, limit: usize) -> Result<Vec<crate::AuditEntry>, AdminError> {
        let q = crate::AuditQuery { limit: Some(limit) };
        self.call(Method::GET, routes::AUDIT, |r| r.query(&q)).await
    }

    /// `GET /v1/admin/certs`.
    pub async fn admin_certs(&self) -> Result<Vec<crate::AdminCertView>, AdminError> {
        self.call(Method::GET, routes::ADMIN_CERTS, |r| r).await
    }

    /// `POST /v1/admin/certs`.
    pub async fn admin_cert_issue(
        &self,
        c: &crate::NewAdminCert,
    ) -> Result<crate::IssuedAdminCert, AdminError> {
        self.call(Method::POST, routes::ADMIN_CERTS, |r| r.json(c))
            .await
    }

    /// `DELETE /v1/admin/certs/{id}`.
    pub async fn admin_cert_revoke(&self, id: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::ADMIN_CERT, &[id]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/ssh/keys`.
    pub async fn ssh_keys(&self) -> Result<Vec<crate::SshKeyView>, AdminError> {
        self.call(Method::GET, routes::SSH_KEYS, |r| r).await
    }

    /// `POST /v1/ssh/keys`.
    pub async fn ssh_key_add(&self, k: &crate::NewSshKey) -> Result<crate::SshKeyView, AdminError> {
        self.call(Method::POST, routes::SSH_KEYS, |r| r.json(k))
            .await
    }

    /// `DELETE /v1/ssh/keys/{id}`.
    pub async fn ssh_key_remove(&self, id: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::SSH_KEY, &[id]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/bmcs`.
    pub async fn bmcs(&self) -> Result<Vec<crate::BmcView>, AdminError> {
        self.call(Method::GET, routes::BMCS, |r| r).await
    }

    /// `GET /v1/nodes/{node}/bmc`.
    pub async fn bmc(&self, node: &str) -> Result<crate::BmcView, AdminError> {
        let route = routes::fill(routes::NODE_BMC, &[node]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `PUT /v1/nodes/{node}/bmc`.
    pub async fn bmc_set(
        &self,
        node: &str,
        s: &crate::BmcSettings,
    ) -> Result<crate::BmcView, AdminError> {
        let route = routes::fill(routes::NODE_BMC, &[node]);
        self.call(Method::PUT, &route, |r| r.json(s)).await
    }

    /// `DELETE /v1/nodes/{node}/bmc`.
    pub async fn bmc_clear(&self, node: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::NODE_BMC, &[node]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/nodes/{node}/power`.
    pub async fn power_status(&self, node: &str) -> Result<crate::PowerView, AdminError> {
        let route = routes::fill(routes::NODE_POWER, &[node]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `GET /v1/nodes/{node}/sensors`.
    pub async fn sensors(&self, node: &str) -> Result<crate::SensorsView, AdminError> {
        let route = routes::fill(routes::NODE_SENSORS, &[node]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `POST /v1/nodes/{node}/power`.
    pub async fn power(
        &self,
        node: &str,
        action: crate::PowerAction,
    ) -> Result<crate::PowerView, AdminError> {
        let route = routes::fill(routes::NODE_POWER, &[node]);
        let req = crate::PowerRequest { action };
        self.call(Method::POST, &route, |r| r.json(&req)).await
    }

    /// `PUT /v1/tenants/{tenant}/quota`.
    pub async fn tenant_quota(&self, tenant: &str, q: QuotaSpec) -> Result<TenantView, AdminError> {
        let route = routes::fill(routes::TENANT_QUOTA, &[tenant]);
        self.call(Method::PUT, &route, |r| r.json(&q)).await
    }

    /// `PUT /v1/tenants/{tenant}/qos`.
    pub async fn tenant_qos(&self, tenant: &str, q: QosSpec) -> Result<TenantView, AdminError> {
        let route = routes::fill(routes::TENANT_QOS, &[tenant]);
        self.call(Method::PUT, &route, |r| r.json(&q)).await
    }

    /// `GET /v1/tenants/{tenant}/kv/pools`.
    pub async fn kv_pools(&self, tenant: &str) -> Result<Vec<crate::KvPoolView>, AdminError> {
        let route = routes::fill(routes::KV_POOLS, &[tenant]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `POST /v1/tenants/{tenant}/kv/pools`.
    pub async fn kv_pool_create(
        &self,
        tenant: &str,
        p: crate::NewKvPool,
    ) -> Result<crate::KvPoolView, AdminError> {
        let route = routes::fill(routes::KV_POOLS, &[tenant]);
        self.call(Method::POST, &route, |r| r.json(&p)).await
    }

    /// `DELETE /v1/tenants/{tenant}/kv/pools/{pool}`.
    pub async fn kv_pool_delete(&self, tenant: &str, pool: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::KV_POOL, &[tenant, pool]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/kv/stats`.
    pub async fn kv_stats(&self) -> Result<crate::KvStats, AdminError> {
        self.call(Method::GET, routes::KV_STATS, |r| r).await
    }

    /// `GET /v1/tenants/{tenant}/buckets`.
    pub async fn tenant_buckets(&self, tenant: &str) -> Result<Vec<BucketView>, AdminError> {
        let route = routes::fill(routes::BUCKETS, &[tenant]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `PUT /v1/tenants/{tenant}/buckets/{bucket}/quota`.
    pub async fn bucket_quota(
        &self,
        tenant: &str,
        bucket: &str,
        q: QuotaSpec,
    ) -> Result<BucketView, AdminError> {
        let route = routes::fill(routes::BUCKET_QUOTA, &[tenant, bucket]);
        self.call(Method::PUT, &route, |r| r.json(&q)).await
    }

    /// `GET /v1/tenants/{tenant}/buckets/{bucket}/snapshots`.
    pub async fn snapshots(&self, tenant: &str, bucket: &str) -> Result<SnapshotsView, AdminError> {
        let route = routes::fill(routes::SNAPSHOTS, &[tenant, bucket]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `POST /v1/tenants/{tenant}/buckets/{bucket}/snapshots`: snapshot `name`
    /// of the bucket as it is now.
    pub async fn create_snapshot(
        &self,
        tenant: &str,
        bucket: &str,
        name: &str,
    ) -> Result<SnapshotView, AdminError> {
        let route = routes::fill(routes::SNAPSHOTS, &[tenant, bucket]);
        let body = NewSnapshot {
            name: name.to_string(),
        };
        self.call(Method::POST, &route, |r| r.json(&body)).await
    }

    /// `DELETE /v1/tenants/{tenant}/buckets/{bucket}/snapshots/{snapshot}`.
    pub async fn delete_snapshot(
        &self,
        tenant: &str,
        bucket: &str,
        name: &str,
    ) -> Result<(), AdminError> {
        let route = routes::fill(routes::SNAPSHOT, &[tenant, bucket, name]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/tenants/{tenant}/buckets/{bucket}/replication`.
    pub async fn replication(
        &self,
        tenant: &str,
        bucket: &str,
    ) -> Result<ReplicationView, AdminError> {
        let route = routes::fill(routes::REPLICATION, &[tenant, bucket]);
        self.call(Method::GET, &route, |r| r).await
    }

    /// `PUT /v1/tenants/{tenant}/buckets/{bucket}/replication`.
    pub async fn set_replication(
        &self,
        tenant: &str,
        bucket: &str,
        spec: &ReplicationSpec,
    ) -> Result<ReplicationView, AdminError> {
        let route = routes::fill(routes::REPLICATION, &[tenant, bucket]);
        self.call(Method::PUT, &route, |r| r.json(spec)).await
    }

    /// `DELETE /v1/tenants/{tenant}/buckets/{bucket}/replication`.
    pub async fn remove_replication(&self, tenant: &str, bucket: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::REPLICATION, &[tenant, bucket]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    /// `GET /v1/exports`: every tenant's NFS exports.
    pub async fn exports(&self) -> Result<Vec<ExportView>, AdminError> {
        self.call(Method::GET, routes::EXPORTS, |r| r).await
    }

    /// `PUT /v1/tenants/{tenant}/buckets/{bucket}/export`: the bucket exported
    /// over NFS as `spec` says (its export replaced).
    pub async fn set_export(
        &self,
        tenant: &str,
        bucket: &str,
        spec: &ExportSpec,
    ) -> Result<ExportView, AdminError> {
        let route = routes::fill(routes::BUCKET_EXPORT, &[tenant, bucket]);
        self.call(Method::PUT, &route, |r| r.json(spec)).await
    }

    /// `DELETE /v1/tenants/{tenant}/buckets/{bucket}/export`: not exported any
    /// more (no error when it was not).
    pub async fn remove_export(&self, tenant: &str, bucket: &str) -> Result<(), AdminError> {
        let route = routes::fill(routes::BUCKET_EXPORT, &[tenant, bucket]);
        let _: bool = self.call(Method::DELETE, &route, |r| r).await?;
        Ok(())
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        route: &str,
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<T, AdminError> {
        let (url, resp) = self.send(method, route, build).await?;
        resp.json()
            .await
            .map_err(|source| AdminError::Decode { url, source })
    }

    /// Sends a request; a success answer is returned unread, any other is turned
    /// into the error it stands for.
    async fn send(
        &self,
        method: Method,
        route: &str,
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<(String, reqwest::Response), AdminError> {
        let url = format!("{}{route}", self.base);
        let mut req = self.http.request(method, &url).timeout(self.timeout);
        // No token: a client certificate speaks for the caller (TLS).
        if !self.token.is_empty() {
            req = req.bearer_auth(&self.token);
        }
        let resp = match build(req).send().await {
            Ok(r) => r,
            Err(source) => {
                return Err(AdminError::Transport {
                    detail: chain(&source),
                    url,
                    source,
                })
            }
        };
        let status = resp.status();
        if status.is_success() {
            return Ok((url, resp));
        }
        let raw = match resp.bytes().await {
            Ok(b) => b,
            Err(source) => {
                return Err(AdminError::Transport {
                    detail: chain(&source),
                    url,
                    source,
                })
            }
        };
        // Not this API's body (a proxy's, or a route mgmtd does not have):
        // the status decides, the text is the message.
        let body = serde_json::from_slice::<ErrorBody>(&raw).unwrap_or_else(|_| ErrorBody {
            kind: ErrorKind::from_http_status(status.as_u16()),
            message: String::from_utf8_lossy(&raw).trim().to_string(),
        });
        Err(AdminError::answered(url, status, body))
    }
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers one request with `status` and `body`.
    async fn answer_once(status: &'static str, ctype: &'static str, body: &'static str) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            let resp = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        });
        addr
    }

    #[tokio::test]
    async fn the_body_decides_the_kind_and_rides_as_the_source() {
        let addr = answer_once(
            "409 Conflict",
            "application/json",
            r#"{"kind":"conflict","message":"already a member of cluster c1"}"#,
        )
        .await;
        let e = AdminClient::new(&addr, "t")
            .cluster_token()
            .await
            .unwrap_err();
        assert!(matches!(e, AdminError::Rejected { .. }), "{e:?}");
        assert_eq!(e.kind(), Some(ErrorKind::Conflict));
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("409 Conflict"), "{e}");
        assert_eq!(
            e.source().unwrap().to_string(),
            "already a member of cluster c1"
        );
    }

    #[tokio::test]
    async fn a_foreign_body_is_classified_by_its_status() {
        let addr = answer_once("502 Bad Gateway", "text/plain", "upstream gone\n").await;
        let e = AdminClient::new(&addr, "t").status().await.unwrap_err();
        assert!(matches!(e, AdminError::Unavailable { .. }), "{e:?}");
        assert!(e.is_retryable());
        assert!(e.to_string().ends_with("upstream gone"), "{e}");
        let addr = answer_once("404 Not Found", "text/plain", "").await;
        let e = AdminClient::new(&addr, "t").drives().await.unwrap_err();
        assert!(matches!(e, AdminError::NotFound { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn no_answer_is_a_transport_failure_and_a_bad_one_a_decode_failure() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let e = AdminClient::new(&addr, "t").gc_status().await.unwrap_err();
        assert!(matches!(e, AdminError::Transport { .. }), "{e:?}");
        assert!(e.is_retryable());
        assert!(e.source().is_some());
        let addr = answer_once("200 OK", "application/json", r#"{"nope":1}"#).await;
        let e = AdminClient::new(&addr, "t").gc_status().await.unwrap_err();
        assert!(matches!(e, AdminError::Decode { .. }), "{e:?}");
    }

    #[test]
    fn a_missing_token_file_says_which() {
        let e = AdminClient::from_token_file("127.0.0.1:1", Path::new("/nonexistent/admin.token"))
            .unwrap_err();
        assert!(matches!(e, AdminError::Token { .. }));
        assert!(e.to_string().contains("/nonexistent/admin.token"), "{e}");
        assert_eq!(
            AdminClient::new("http://h:1/", "t").base_url(),
            "http://h:1"
        );
        assert_eq!(AdminClient::new("h:1", "t").base_url(), "http://h:1");
    }
}
