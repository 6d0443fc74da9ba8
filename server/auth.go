package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// API groups that a Restriction may guard, as Triton's
// --http-restricted-api does. Health endpoints (GET /v2/health/live,
// /v2/health/ready, a model's /ready; gRPC ServerLive, ServerReady,
// ModelReady) belong to no group and are never restricted: probes must
// reach them.
const (
	GroupInference = "inference" // POST …/infer; gRPC ModelInfer
	GroupMetadata  = "metadata"  // GET /v2, /v2/models, a model's metadata; gRPC ServerMetadata, ModelMetadata
	GroupJobs      = "jobs"      // /v2/jobs and /v2/jobs/{id}, every method
	GroupMetrics   = "metrics"   // GET /metrics
)

// APIGroups lists the groups a Restriction may name.
var APIGroups = []string{GroupInference, GroupMetadata, GroupJobs, GroupMetrics}

// Restriction guards API groups with a bearer token: a request to one of
// Groups must carry "Authorization: Bearer <Token>" (HTTP) or the same in
// the "authorization" metadata (gRPC). Without it the answer is 401
// (Unauthenticated), with another token 403 (PermissionDenied). Several
// restrictions may name one group: any of their tokens is accepted.
type Restriction struct {
	Groups []string
	Token  string
}

// guard is the restrictions by group.
type guard map[string][][]byte

func newGuard(rs []Restriction) (guard, error) {
	g := guard{}
	for _, r := range rs {
		if r.Token == "" {
			return nil, fmt.Errorf("%w: a restriction of %s has an empty token", ErrConfig, strings.Join(r.Groups, ", "))
		}
		for _, grp := range r.Groups {
			if !slices.Contains(APIGroups, grp) {
				return nil, fmt.Errorf("%w: unknown API group %q (want %s)", ErrConfig, grp, strings.Join(APIGroups, ", "))
			}
			g[grp] = append(g[grp], []byte(r.Token))
		}
	}
	return g, nil
}

// authResult is what a check found.
type authResult uint8

const (
	authOK authResult = iota
	authMissing
	authWrong
)

// check tests the credential (the Authorization value) for group; a group
// nobody restricted, or "" (health), passes.
func (g guard) check(group, credential string) authResult {
	toks := g[group]
	if group == "" || len(toks) == 0 {
		return authOK
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(credential), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return authMissing
	}
	got := []byte(strings.TrimSpace(tok))
	pass := 0
	for _, want := range toks {
		pass |= subtle.ConstantTimeCompare(got, want)
	}
	if pass == 1 {
		return authOK
	}
	return authWrong
}

// httpGroup is the group of an HTTP request ("" for health and unknown
// paths, which the mux answers).
func httpGroup(r *http.Request) string {
	p := r.URL.Path
	switch {
	case p == "/metrics":
		return GroupMetrics
	case p == "/v2/jobs" || strings.HasPrefix(p, "/v2/jobs/"):
		return GroupJobs
	case strings.HasPrefix(p, "/v2/health/"):
		return ""
	case strings.HasPrefix(p, "/v2/models/") && strings.HasSuffix(p, "/ready"):
		return ""
	case strings.HasPrefix(p, "/v2/models/") && strings.HasSuffix(p, "/infer"):
		return GroupInference
	case p == "/v2" || p == "/v2/" || p == "/v2/models" || strings.HasPrefix(p, "/v2/models/"):
		return GroupMetadata
	}
	return ""
}

// authorizeHTTP answers r with 401 or 403 and returns false when its group
// is restricted and it lacks the token.
func (h *Handler) authorizeHTTP(w http.ResponseWriter, r *http.Request) bool {
	group := httpGroup(r)
	switch h.guard.check(group, r.Header.Get("Authorization")) {
	case authMissing:
		w.Header().Set("WWW-Authenticate", `Bearer realm="atoll"`)
		writeJSON(w, http.StatusUnauthorized, errorJSON{Error: fmt.Sprintf("the %s API is restricted: send the header 'Authorization: Bearer <token>' with the token the daemon was configured with (restricted: in its config)", group)})
		return false
	case authWrong:
		writeJSON(w, http.StatusForbidden, errorJSON{Error: fmt.Sprintf("the token sent is not one of the %s API's tokens", group)})
		return false
	}
	return true
}

// Guard applies the restrictions to an HTTP handler outside the daemon's
// own (a proxy in front of daemons, such as server/standby's supervisor):
// a request to a restricted group without its token is answered 401 or 403,
// exactly as the daemon answers it, and never reaches next.
func Guard(rs []Restriction, next http.Handler) (http.Handler, error) {
	g, err := newGuard(rs)
	if err != nil {
		return nil, err
	}
	h := &Handler{guard: g}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.authorizeHTTP(w, r) {
			next.ServeHTTP(w, r)
		}
	}), nil
}

// GuardGRPC is Guard for a gRPC server outside the daemon's (a proxy in
// front of daemons): a stream interceptor that refuses a call to a
// restricted group without its token, Unauthenticated or PermissionDenied,
// exactly as the daemon does.
func GuardGRPC(rs []Restriction) (grpc.StreamServerInterceptor, error) {
	g, err := newGuard(rs)
	if err != nil {
		return nil, err
	}
	h := &Handler{guard: g}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		_, err := h.grpcAuth(ss.Context(), nil, &grpc.UnaryServerInfo{FullMethod: info.FullMethod}, func(context.Context, any) (any, error) {
			return nil, next(srv, ss)
		})
		return err
	}, nil
}

// grpcGroup is the group of a gRPC method ("" for health).
func grpcGroup(fullMethod string) string {
	switch fullMethod[strings.LastIndexByte(fullMethod, '/')+1:] {
	case "ServerLive", "ServerReady", "ModelReady":
		return ""
	case "ModelInfer":
		return GroupInference
	}
	return GroupMetadata
}

// grpcAuth is the unary interceptor that applies the guard.
func (h *Handler) grpcAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	group := grpcGroup(info.FullMethod)
	cred := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			cred = v[0]
		}
	}
	switch h.guard.check(group, cred) {
	case authMissing:
		return nil, status.Errorf(codes.Unauthenticated, "the %s API is restricted: send the metadata 'authorization: Bearer <token>'", group)
	case authWrong:
		return nil, status.Errorf(codes.PermissionDenied, "the token sent is not one of the %s API's tokens", group)
	}
	return next(ctx, req)
}

// RestrictedConfig is one restriction in the daemon's config: the groups
// it guards and where its token comes from (exactly one of a file, whose
// content trimmed of surrounding white space is the token, or an
// environment variable).
type RestrictedConfig struct {
	Groups    []string `yaml:"groups"`
	TokenFile string   `yaml:"token_file,omitempty"`
	TokenEnv  string   `yaml:"token_env,omitempty"`
}

// validate checks the fields (not the token's presence: Restrictions reads it).
func (r RestrictedConfig) validate(i int) error {
	path := fmt.Sprintf("restricted[%d]", i)
	if len(r.Groups) == 0 {
		return fmt.Errorf("%w: %s.groups: name at least one of %s", ErrConfig, path, strings.Join(APIGroups, ", "))
	}
	for _, g := range r.Groups {
		if !slices.Contains(APIGroups, g) {
			return fmt.Errorf("%w: %s.groups: unknown API group %q (want %s)", ErrConfig, path, g, strings.Join(APIGroups, ", "))
		}
	}
	if (r.TokenFile == "") == (r.TokenEnv == "") {
		return fmt.Errorf("%w: %s: give exactly one of token_file and token_env", ErrConfig, path)
	}
	return nil
}

// Restrictions reads the configured tokens. A missing file, an unset
// variable or an empty token is an error naming where it looked.
func (c Config) Restrictions() ([]Restriction, error) {
	var out []Restriction
	for i, r := range c.Restricted {
		if err := r.validate(i); err != nil {
			return nil, err
		}
		var tok string
		if r.TokenFile != "" {
			data, err := os.ReadFile(r.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("%w: restricted[%d].token_file: %v", ErrConfig, i, err)
			}
			tok = strings.TrimSpace(string(data))
		} else {
			v, ok := os.LookupEnv(r.TokenEnv)
			if !ok {
				return nil, fmt.Errorf("%w: restricted[%d].token_env: the variable %s is not set", ErrConfig, i, r.TokenEnv)
			}
			tok = strings.TrimSpace(v)
		}
		if tok == "" {
			return nil, fmt.Errorf("%w: restricted[%d]: the token is empty", ErrConfig, i)
		}
		if strings.ContainsAny(tok, " \t\r\n") {
			return nil, fmt.Errorf("%w: restricted[%d]: the token contains white space", ErrConfig, i)
		}
		out = append(out, Restriction{Groups: r.Groups, Token: tok})
	}
	return out, nil
}
