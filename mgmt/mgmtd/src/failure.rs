//! How the admin API fails: every error answer is an [`ErrorBody`] of the kind the
//! failure is, with the HTTP status cairn-adminapi gives that kind. The kinds of
//! the layers' errors are decided here, at the edge, and nowhere else.

use crate::MgmtError;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairn_adminapi::{ErrorBody, ErrorKind};
use cairn_cluster::ClusterError;
use cairn_meta::MetaError;
use cairn_objects::ObjectError;

/// A failed admin request: what the client gets.
#[derive(Debug)]
pub(crate) struct Failure(ErrorBody);

impl Failure {
    pub(crate) fn new(kind: ErrorKind, message: impl std::fmt::Display) -> Failure {
        Failure(ErrorBody::new(kind, message))
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    pub(crate) fn message(&self) -> &str {
        &self.0.message
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.kind.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.0)).into_response()
    }
}

/// A body that is not the route's (axum's own rejection says why).
impl From<JsonRejection> for Failure {
    fn from(e: JsonRejection) -> Failure {
        Failure::new(ErrorKind::Invalid, e.body_text())
    }
}

impl From<QueryRejection> for Failure {
    fn from(e: QueryRejection) -> Failure {
        Failure::new(ErrorKind::Invalid, e.body_text())
    }
}

fn cluster_kind(e: &ClusterError) -> ErrorKind {
    match e {
        // The cluster cannot decide now: no quorum, no leader, a peer that does
        // not answer, a node without its certificate yet.
        ClusterError::NoQuorum(_)
        | ClusterError::Unknown(_)
        | ClusterError::Peer { .. }
        | ClusterError::Raft(_)
        | ClusterError::Busy(_)
        | ClusterError::NotCertified => ErrorKind::Unavailable,
        ClusterError::NotMember
        | ClusterError::AlreadyMember(_)
        | ClusterError::JoinRefused(_)
        | ClusterError::Refused(_)
        | ClusterError::MasterKey(cairn_envelope::EnvelopeError::MasterKeyExists { .. }) => {
            ErrorKind::Conflict
        }
        ClusterError::State(_) | ClusterError::Pki(_) | ClusterError::MasterKey(_) => {
            ErrorKind::Internal
        }
    }
}

fn meta_kind(e: &MetaError) -> ErrorKind {
    match e {
        MetaError::Unavailable(_) | MetaError::Stopped => ErrorKind::Unavailable,
        MetaError::NoSuchTenant(_)
        | MetaError::NoSuchUser(_)
        | MetaError::NoSuchAccessKey(_)
        | MetaError::NoSuchAdminToken(_)
        | MetaError::NoSuchBmc(_)
        | MetaError::NoSuchSshKey(_)
        | MetaError::NoSuchAdminCert(_)
        | MetaError::NoSuchSnapshot(_) => ErrorKind::NotFound,
        MetaError::InvalidSnapshot(_) | MetaError::InvalidLock(_) => ErrorKind::Invalid,
        // (Replication needs versioning enabled.)
        MetaError::LockState(_) => ErrorKind::Conflict,
        MetaError::TenantExists(_)
        | MetaError::UserExists(_)
        | MetaError::KeyExists
        | MetaError::TenantNotEmpty(_)
        | MetaError::QuotaExceeded(_)
        | MetaError::BucketExists(_)
        | MetaError::BucketNotEmpty(_)
        | MetaError::SnapshotExists(_)
        | MetaError::HasSnapshots(_) => ErrorKind::Conflict,
        MetaError::NoSuchBucket(_) => ErrorKind::NotFound,
        // What the admin API reads of the metadata is its own; anything else
        // failing there is the node's fault.
        _ => ErrorKind::Internal,
    }
}

fn object_kind(e: &ObjectError) -> ErrorKind {
    match e {
        ObjectError::Meta(m) => meta_kind(m),
        ObjectError::Unavailable(_) | ObjectError::Chunk(_) | ObjectError::OutcomeUnknown => {
            ErrorKind::Unavailable
        }
        _ => ErrorKind::Internal,
    }
}

impl From<ClusterError> for Failure {
    fn from(e: ClusterError) -> Failure {
        Failure::new(cluster_kind(&e), e)
    }
}

impl From<MetaError> for Failure {
    fn from(e: MetaError) -> Failure {
        Failure::new(meta_kind(&e), e)
    }
}

impl From<ObjectError> for Failure {
    fn from(e: ObjectError) -> Failure {
        Failure::new(object_kind(&e), e)
    }
}

impl From<MgmtError> for Failure {
    fn from(e: MgmtError) -> Failure {
        let kind = match &e {
            MgmtError::NoSuchNode(_) => ErrorKind::NotFound,
            MgmtError::AmbiguousNode(_) => ErrorKind::Invalid,
            MgmtError::NodeHoldsFragments { .. } => ErrorKind::Conflict,
            MgmtError::Cluster(c) => cluster_kind(c),
            MgmtError::Meta(m) => meta_kind(m),
            MgmtError::Objects(o) => object_kind(o),
            MgmtError::DatapathUnreachable { .. } => ErrorKind::Unavailable,
            MgmtError::Config(_)
            | MgmtError::Io { .. }
            | MgmtError::Credentials(_)
            | MgmtError::S3Domain(_) => ErrorKind::Internal,
        };
        Failure::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_errors_get_the_kind_a_client_can_act_on() {
        let f = Failure::from(ClusterError::NoQuorum("no leader".into()));
        assert_eq!(f.kind(), ErrorKind::Unavailable);
        assert_eq!(f.message(), "no quorum: no leader");
        let f = Failure::from(MgmtError::Cluster(ClusterError::AlreadyMember("c".into())));
        assert_eq!(f.kind(), ErrorKind::Conflict);
        let f = Failure::from(MgmtError::NoSuchNode("abc".into()));
        assert_eq!(f.kind(), ErrorKind::NotFound);
        let f = Failure::from(ObjectError::Meta(MetaError::Unavailable("x".into())));
        assert_eq!(f.kind(), ErrorKind::Unavailable);
        let f = Failure::from(MgmtError::Config("bad".into()));
        assert_eq!(f.kind(), ErrorKind::Internal);
    }

    #[tokio::test]
    async fn a_failure_answers_its_status_and_a_json_body() {
        let r = Failure::new(ErrorKind::Conflict, "single-node mode").into_response();
        assert_eq!(r.status(), StatusCode::CONFLICT);
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let b: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(b, ErrorBody::new(ErrorKind::Conflict, "single-node mode"));
    }
}
