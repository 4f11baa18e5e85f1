//! The cluster's certificates: the CA that issues them, the API server's serving certificate,
//! client certificates (whose subject is who their holder is: common name = user, organizations
//! = groups, as Kubernetes reads them), and certificate signing requests (PKCS #10) made and signed.
//! [`legacy_token`] signs the legacy service-account tokens kept in Secrets.
//!
//! A crate of its own because four parts of skiff issue or read certificates and they must not
//! depend on each other: the API server (serving, and authenticating client certificates), the
//! CSR signer among the controllers, an agent bootstrapping its node identity, and the binary
//! that gives each built-in component its own client certificate. Files and TLS serving stay
//! with their owners; this crate is certificates (and token signing) only, no I/O.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use x509_parser::prelude::FromDer as _;

pub mod legacy_token;

/// Errors of certificate work.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen could not build or sign a certificate.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM or DER certificate that does not parse.
    #[error("not a usable certificate: {0}")]
    BadCertificate(String),
    /// A private key that does not parse.
    #[error("not a usable private key")]
    BadKey,
    /// A certificate signing request that does not parse or whose signature does not hold.
    #[error("invalid certificate signing request: {0}")]
    BadRequest(String),
    /// A token could not be signed.
    #[error("cannot sign a token: {0}")]
    Sign(String),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Who a client certificate says its holder is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subject {
    /// The common name: the user name (`system:node:n1`, `system:kube-scheduler`).
    pub common_name: String,
    /// The organizations: the user's groups (`system:nodes`).
    pub organizations: Vec<String>,
}

impl Subject {
    /// A subject with `common_name` in `organizations`.
    pub fn new(common_name: &str, organizations: &[&str]) -> Subject {
        Subject {
            common_name: common_name.to_string(),
            organizations: organizations.iter().map(|o| o.to_string()).collect(),
        }
    }

    /// The subject as rcgen writes it. rcgen keeps one value per attribute type, so a subject
    /// with several organizations cannot be written; refusing it beats dropping groups.
    fn distinguished_name(&self) -> Result<DistinguishedName> {
        if self.organizations.len() > 1 {
            return Err(Error::BadRequest(
                "skiff signs certificates with at most one organization (group)".into(),
            ));
        }
        let mut dn = DistinguishedName::new();
        for organization in &self.organizations {
            dn.push(DnType::OrganizationName, organization.as_str());
        }
        dn.push(DnType::CommonName, self.common_name.as_str());
        Ok(dn)
    }
}

/// A certificate and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

/// What a signed certificate may be used for: Kubernetes' `KeyUsage` strings of a
/// CertificateSigningRequest's `spec.usages`, those this CA signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Usage {
    /// `digital signature`.
    DigitalSignature,
    /// `key encipherment`.
    KeyEncipherment,
    /// `client auth`.
    ClientAuth,
    /// `server auth`.
    ServerAuth,
}

impl Usage {
    /// The usage a `spec.usages` string names; `None` for one this CA does not sign
    /// (`cert sign`, `code signing`, ...).
    pub fn parse(name: &str) -> Option<Usage> {
        Some(match name {
            "digital signature" => Usage::DigitalSignature,
            "key encipherment" => Usage::KeyEncipherment,
            "client auth" => Usage::ClientAuth,
            "server auth" => Usage::ServerAuth,
            _ => return None,
        })
    }
}

/// The CA's subject and key usages, for a new CA.
fn ca_params(common_name: &str) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "skiff");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// How far before now a certificate starts being valid: clocks of the machines that check it
/// may lag (Kubernetes' signer backdates by five minutes too).
const BACKDATE: Duration = Duration::from_secs(5 * 60);

fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    // Positive and non-zero, as RFC 5280 asks.
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    SerialNumber::from_slice(&bytes)
}

fn offset(at: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(at)
}

/// The cluster's CA: issues serving and client certificates and signs requests.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
    not_after: SystemTime,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

impl Authority {
    /// A new self-signed CA called `common_name`, valid for `validity`.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Authority> {
        let key = KeyPair::generate()?;
        let mut params = ca_params(common_name)?;
        let now = SystemTime::now();
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(now + validity);
        params.serial_number = Some(random_serial());
        let cert = params.self_signed(&key)?;
        Authority::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// The CA of `cert_pem` with its private key `key_pem`.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Authority> {
        let key = KeyPair::from_pem(key_pem).map_err(|_| Error::BadKey)?;
        let not_after = not_after(cert_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)
            .map_err(|e| Error::BadCertificate(e.to_string()))?;
        Ok(Authority {
            issuer,
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            not_after,
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PEM (to be written to the PKI directory, mode 0600).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The end of a certificate issued now for `validity`: no later than the CA's own.
    fn end(&self, now: SystemTime, validity: Duration) -> SystemTime {
        (now + validity).min(self.not_after)
    }

    fn sign_params(&self, params: &mut CertificateParams, validity: Duration) {
        let now = SystemTime::now();
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(self.end(now, validity));
        params.serial_number = Some(random_serial());
        params.use_authority_key_identifier_extension = true;
        params.is_ca = IsCa::ExplicitNoCa;
    }

    /// A new serving certificate for `sans` (DNS names or IP addresses), valid for `validity`.
    pub fn issue_server(&self, sans: &[String], validity: Duration) -> Result<Credentials> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(sans.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "skiff-apiserver");
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign_params(&mut params, validity);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Credentials {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A new client certificate (and key) for `subject`, valid for `validity`.
    pub fn issue_client(&self, subject: &Subject, validity: Duration) -> Result<Credentials> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = subject.distinguished_name()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign_params(&mut params, validity);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Credentials {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A certificate for `request`'s subject and public key with exactly `usages`, valid for
    /// `validity` (and no longer than the CA), PEM. What the request itself asks for beyond its
    /// subject and names (its own key usages, CA-ness) is ignored, as Kubernetes' signers ignore
    /// it: the CertificateSigningRequest's `usages` decide.
    pub fn sign(&self, request: &Request, usages: &[Usage], validity: Duration) -> Result<String> {
        let mut csr = request.params.clone();
        let params = &mut csr.params;
        params.key_usages = Vec::new();
        params.extended_key_usages = Vec::new();
        for usage in usages {
            match usage {
                Usage::DigitalSignature => {
                    params.key_usages.push(KeyUsagePurpose::DigitalSignature)
                }
                Usage::KeyEncipherment => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
                Usage::ClientAuth => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ClientAuth),
                Usage::ServerAuth => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ServerAuth),
            }
        }
        self.sign_params(params, validity);
        Ok(csr.signed_by(&self.issuer)?.pem())
    }
}

/// A PKCS #10 certificate signing request, parsed and with its self-signature checked.
#[derive(Debug, Clone)]
pub struct Request {
    params: CertificateSigningRequestParams,
    /// Who the request asks to be.
    pub subject: Subject,
}

impl Request {
    /// Parses a PEM `CERTIFICATE REQUEST` and checks its signature (proof that the requester
    /// holds the key).
    pub fn from_pem(pem: &str) -> Result<Request> {
        let not_pem = || Error::BadRequest("not a PEM-encoded PKCS #10 certificate request".into());
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|_| not_pem())?;
        if !matches!(
            block.label.as_str(),
            "CERTIFICATE REQUEST" | "NEW CERTIFICATE REQUEST"
        ) {
            return Err(not_pem());
        }
        Request::from_der(&block.contents)
    }

    /// [`Request::from_pem`] of the DER inside the PEM block.
    pub fn from_der(der: &[u8]) -> Result<Request> {
        let params = CertificateSigningRequestParams::from_der(&der.into())
            .map_err(|e| Error::BadRequest(request_error(&e)))?;
        let (_, parsed) =
            x509_parser::certification_request::X509CertificationRequest::from_der(der)
                .map_err(|e| Error::BadRequest(e.to_string()))?;
        let subject = subject_of_name(&parsed.certification_request_info.subject);
        // What rcgen re-encodes must be what was asked: it keeps one value per attribute type.
        subject.distinguished_name()?;
        Ok(Request { params, subject })
    }

    /// How many subject alternative names (DNS names, IP addresses, e-mail addresses, URIs) the
    /// request asks for: Kubernetes' kubelet client signer wants none.
    pub fn alternative_names(&self) -> usize {
        self.params.params.subject_alt_names.len()
    }

    /// Whether the request asks for a CA certificate.
    pub fn asks_for_ca(&self) -> bool {
        matches!(self.params.params.is_ca, IsCa::Ca(_))
    }

    /// The request's DNS names.
    pub fn dns_names(&self) -> Vec<String> {
        self.params
            .params
            .subject_alt_names
            .iter()
            .filter_map(|san| match san {
                SanType::DnsName(name) => Some(name.to_string()),
                _ => None,
            })
            .collect()
    }
}

fn request_error(error: &rcgen::Error) -> String {
    match error {
        rcgen::Error::CouldNotParseCertificationRequest => {
            "not a PEM-encoded PKCS #10 certificate request".to_string()
        }
        rcgen::Error::InvalidCertificationRequestSignature => {
            "its signature does not verify".to_string()
        }
        rcgen::Error::UnsupportedExtension => "it asks for an extension skiff does not sign".into(),
        other => other.to_string(),
    }
}

/// A new private key and a request for a certificate of `subject` signed with it:
/// (request PEM, key PEM). An agent sends the request in a CertificateSigningRequest and keeps
/// the key.
pub fn new_request(subject: &Subject) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = subject.distinguished_name()?;
    let request = params.serialize_request(&key)?;
    Ok((request.pem()?, key.serialize_pem()))
}

/// The first certificate of a PEM bundle, DER.
fn first_der(pem: &str) -> Result<Vec<u8>> {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| Error::BadCertificate(format!("not PEM: {e}")))?;
    Ok(parsed.contents)
}

/// Who the DER certificate `der` says its holder is (its subject's common name and
/// organizations). The certificate is not verified here: the TLS layer checks that it chains
/// to the CA and is valid now.
pub fn subject_of(der: &[u8]) -> Result<Subject> {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der)
        .map_err(|e| Error::BadCertificate(e.to_string()))?;
    Ok(subject_of_name(cert.subject()))
}

fn subject_of_name(name: &x509_parser::x509::X509Name<'_>) -> Subject {
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str().ok().map(str::to_string)
    };
    Subject {
        common_name: name
            .iter_common_name()
            .next()
            .and_then(text)
            .unwrap_or_default(),
        organizations: name.iter_organization().filter_map(text).collect(),
    }
}

/// When the (first) certificate of `pem` stops being valid.
pub fn not_after(pem: &str) -> Result<SystemTime> {
    Ok(validity(pem)?.1)
}

/// When the (first) certificate of `pem` starts and stops being valid.
pub fn validity(pem: &str) -> Result<(SystemTime, SystemTime)> {
    let der = first_der(pem)?;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der)
        .map_err(|e| Error::BadCertificate(e.to_string()))?;
    let time = |t: &x509_parser::time::ASN1Time| {
        SystemTime::UNIX_EPOCH + Duration::from_secs(t.timestamp().max(0) as u64)
    };
    Ok((
        time(&cert.validity().not_before),
        time(&cert.validity().not_after),
    ))
}

/// Whether the certificate `cert_pem` is one `ca` issued, still valid `margin` from now, and
/// matches the private key `key_pem`: a stored credential worth reusing.
pub fn reusable(ca: &Authority, credentials: &Credentials, margin: Duration) -> bool {
    let Ok(der) = first_der(&credentials.cert_pem) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(&der) else {
        return false;
    };
    let Ok(ca_der) = first_der(&ca.cert_pem) else {
        return false;
    };
    let Ok((_, ca_cert)) = x509_parser::certificate::X509Certificate::from_der(&ca_der) else {
        return false;
    };
    let Ok(key) = KeyPair::from_pem(&credentials.key_pem) else {
        return false;
    };
    let horizon = SystemTime::now() + margin;
    let horizon = horizon
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(i64::MAX);
    cert.verify_signature(Some(ca_cert.public_key())).is_ok()
        && cert.validity().not_after.timestamp() > horizon
        && cert.public_key().subject_public_key.data.as_ref() == key.public_key_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

    fn ca() -> Authority {
        Authority::generate("test-ca", YEAR).unwrap()
    }

    #[test]
    fn a_client_certificate_names_its_user_and_groups() {
        let ca = ca();
        let subject = Subject::new("system:node:n1", &["system:nodes"]);
        let two = Subject::new("x", &["a", "b"]);
        assert!(matches!(
            ca.issue_client(&two, YEAR),
            Err(Error::BadRequest(_))
        ));
        let issued = ca.issue_client(&subject, YEAR).unwrap();
        let der = first_der(&issued.cert_pem).unwrap();
        assert_eq!(subject_of(&der).unwrap(), subject);
        assert!(reusable(&ca, &issued, Duration::from_secs(3600)));
        // Not past its end, and not from another CA, and not with another key.
        assert!(!reusable(&ca, &issued, 2 * YEAR));
        assert!(!reusable(&super::tests::ca(), &issued, Duration::ZERO));
        let other = ca.issue_client(&subject, YEAR).unwrap();
        let mixed = Credentials {
            cert_pem: issued.cert_pem.clone(),
            key_pem: other.key_pem,
        };
        assert!(!reusable(&ca, &mixed, Duration::ZERO));
    }

    #[test]
    fn a_request_is_signed_with_the_usages_given_not_those_asked() {
        let ca = ca();
        let subject = Subject::new("system:node:n2", &["system:nodes"]);
        let (request_pem, _key) = new_request(&subject).unwrap();
        let request = Request::from_pem(&request_pem).unwrap();
        assert_eq!(request.subject, subject);
        assert_eq!(request.alternative_names(), 0);
        assert!(!request.asks_for_ca());
        let cert = ca
            .sign(
                &request,
                &[Usage::DigitalSignature, Usage::ClientAuth],
                Duration::from_secs(3600),
            )
            .unwrap();
        let der = first_der(&cert).unwrap();
        assert_eq!(subject_of(&der).unwrap(), subject);
        let (_, parsed) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
        let eku = parsed.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let end = not_after(&cert).unwrap();
        let left = end.duration_since(SystemTime::now()).unwrap();
        assert!(left <= Duration::from_secs(3600) && left > Duration::from_secs(3500));
    }

    #[test]
    fn a_certificate_never_outlives_its_ca() {
        let ca = Authority::generate("short", Duration::from_secs(7200)).unwrap();
        let issued = ca.issue_client(&Subject::new("u", &[]), YEAR).unwrap();
        assert!(not_after(&issued.cert_pem).unwrap() <= not_after(ca.cert_pem()).unwrap());
    }

    #[test]
    fn garbage_and_tampered_requests_are_refused() {
        assert!(matches!(
            Request::from_pem("not a request"),
            Err(Error::BadRequest(_))
        ));
        let (pem, _) = new_request(&Subject::new("alice", &[])).unwrap();
        // Flip one byte of the signed body: the signature no longer verifies.
        let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .unwrap()
            .1
            .contents;
        assert!(Request::from_der(&der).is_ok());
        let mut tampered = der.clone();
        let at = tampered.len() / 3;
        tampered[at] ^= 0x01;
        assert!(matches!(
            Request::from_der(&tampered),
            Err(Error::BadRequest(_))
        ));
        // A certificate is not a request.
        let ca = ca();
        assert!(matches!(
            Request::from_pem(ca.cert_pem()),
            Err(Error::BadRequest(_))
        ));
    }

    #[test]
    fn usages_parse_as_kubernetes_spells_them() {
        assert_eq!(Usage::parse("client auth"), Some(Usage::ClientAuth));
        assert_eq!(
            Usage::parse("digital signature"),
            Some(Usage::DigitalSignature)
        );
        assert_eq!(Usage::parse("cert sign"), None);
    }

    #[test]
    fn a_ca_rebuilt_from_its_files_signs_for_the_same_chain() {
        let first = ca();
        let again = Authority::from_pem(first.cert_pem(), first.key_pem()).unwrap();
        let issued = again
            .issue_client(&Subject::new("bob", &["devs"]), YEAR)
            .unwrap();
        assert!(reusable(&first, &issued, Duration::ZERO));
        assert!(matches!(
            Authority::from_pem(first.cert_pem(), "junk"),
            Err(Error::BadKey)
        ));
    }
}
