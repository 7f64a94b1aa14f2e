//! The error body every failed admin route answers, and the HTTP status that goes
//! with each kind of failure.

use serde::{Deserialize, Serialize};

/// What kind of failure a route answered; it decides the HTTP status and what a
/// client may do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 400: the request itself is wrong (a malformed body, `K+M` that is not).
    Invalid,
    /// 401: no admin token, or the wrong one.
    Unauthorized,
    /// 403: the token is right but the route is not the caller's to use.
    Forbidden,
    /// 404: what the request names does not exist (a node id, a route).
    NotFound,
    /// 409: refused in the node's present state (single-node mode, already a
    /// member, a node still holding fragments, a map change the cluster refused).
    Conflict,
    /// 503: not now, try again: no quorum or leader yet, not a member yet, the
    /// datapath not answering, a peer unreachable.
    Unavailable,
    /// 500: the node failed (its metadata unreadable, say): see its log.
    Internal,
}

impl ErrorKind {
    /// The HTTP status a route answers with for this kind.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::Invalid => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::Unavailable => 503,
            ErrorKind::Internal => 500,
        }
    }

    /// The kind an error status stands for when its body does not say (a proxy's
    /// answer, or a body that is not this API's).
    pub fn from_http_status(status: u16) -> ErrorKind {
        match status {
            401 => ErrorKind::Unauthorized,
            403 => ErrorKind::Forbidden,
            404 => ErrorKind::NotFound,
            409 => ErrorKind::Conflict,
            502..=504 => ErrorKind::Unavailable,
            400..=499 => ErrorKind::Invalid,
            _ => ErrorKind::Internal,
        }
    }

    /// Asking again later may succeed.
    pub fn is_retryable(self) -> bool {
        self == ErrorKind::Unavailable
    }
}

/// The JSON body of every error answer: `{"kind": "conflict", "message": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ErrorBody {
    pub kind: ErrorKind,
    /// For the operator, one line.
    pub message: String,
}

impl ErrorBody {
    pub fn new(kind: ErrorKind, message: impl std::fmt::Display) -> ErrorBody {
        ErrorBody {
            kind,
            message: message.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_comes_back_from_its_own_status() {
        for k in [
            ErrorKind::Invalid,
            ErrorKind::Unauthorized,
            ErrorKind::Forbidden,
            ErrorKind::NotFound,
            ErrorKind::Conflict,
            ErrorKind::Unavailable,
            ErrorKind::Internal,
        ] {
            assert_eq!(ErrorKind::from_http_status(k.http_status()), k);
        }
        assert_eq!(ErrorKind::from_http_status(504), ErrorKind::Unavailable);
        assert_eq!(ErrorKind::from_http_status(422), ErrorKind::Invalid);
        assert_eq!(ErrorKind::from_http_status(507), ErrorKind::Internal);
    }

    #[test]
    fn the_body_is_plain_json() {
        let b = ErrorBody::new(ErrorKind::NotFound, "no node 42");
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "not_found", "message": "no node 42"})
        );
        assert_eq!(serde_json::from_value::<ErrorBody>(v).unwrap(), b);
    }
}
