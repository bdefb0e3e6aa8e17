//! Certificates made on the fly: a CA for the apiserver's serving certificate, and CAs and
//! client certificates (valid or expired) for mTLS tests.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use crate::Error;

fn pki_err(e: rcgen::Error) -> Error {
    Error::Other(format!("certificate generation failed: {e}"))
}

/// A PEM certificate and its PEM private key.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate authority that can issue serving and client certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

/// What a certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
}

impl Ca {
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate().map_err(pki_err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_err)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = dn(common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + Duration::days(365);
        let cert = params.self_signed(&key).map_err(pki_err)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A certificate valid from one hour ago for `valid_for` (negative: already expired).
    pub fn issue(
        &self,
        common_name: &str,
        sans: &[&str],
        usage: Usage,
        valid_for: Duration,
    ) -> Result<CertPair, Error> {
        let key = KeyPair::generate().map_err(pki_err)?;
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).map_err(pki_err)?;
        params.distinguished_name = dn(common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        let now = OffsetDateTime::now_utc();
        if valid_for.is_negative() {
            params.not_before = now - Duration::days(2);
            params.not_after = now + valid_for;
        } else {
            params.not_before = now - Duration::hours(1);
            params.not_after = now + valid_for;
        }
        let cert = params.signed_by(&key, &self.issuer).map_err(pki_err)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh ECDSA P-256 key pair: (private key PKCS#8 PEM, public key SPKI PEM).
pub fn signing_key_pair() -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(pki_err)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}
