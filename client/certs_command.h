// `baton certs --out DIR --hosts h1,h2[,...]`: everything mutual TLS and the job service's token need
// (rpc/tls.h); CertsCommand lists the files it writes.
#pragma once

#include "client/commands.h"

namespace baton {

// Writes:
//   DIR/ca.crt, DIR/ca.key (0600)        the CA; keep ca.key offline, it only signs new certificates
//   DIR/token (0600)                     the job service's bearer token (coordinator --token_file)
//   DIR/<host>/ca.crt, tls.crt, tls.key  per host a certificate for TLS server and client (SAN: the host, and
//                                        localhost/127.0.0.1/::1 for local workers): --tls_dir DIR/<host>;
//                                        `a+b+c`: one certificate for all three names in DIR/a/ (the pods of
//                                        a StatefulSet share one Secret)
//   DIR/client/ca.crt, tls.crt, tls.key, token   for `baton` (--tls-dir DIR/client)
// Keys are EC P-256; certificates are valid for --days (default 365). Refuses to overwrite an existing CA.
Command CertsCommand();

}  // namespace baton
