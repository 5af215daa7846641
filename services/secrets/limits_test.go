package secrets

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/settings"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// fakeClock is a settable time for the limiter.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestWriteLimiterAdmitsBurstThenRefills(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)}
	w := newWriteLimiter(2, 5, 100, clock.now, nil) // 2 writes/s, 5 at once
	for i := range 5 {
		if _, ok := w.admit("user:alice"); !ok {
			t.Fatalf("write %d of the burst refused", i+1)
		}
	}
	wait, ok := w.admit("user:alice")
	if ok || wait <= 0 || wait > 500*time.Millisecond {
		t.Fatalf("write past the burst: ok=%v wait=%v, want refused with a wait of at most 1/rate", ok, wait)
	}
	// Refused writes take nothing: however many are refused, one token is back after 1/rate.
	for range 10 {
		w.admit("user:alice")
	}
	// Another principal has its own allowance.
	if _, ok := w.admit("user:bob"); !ok {
		t.Fatal("bob refused because alice used up her allowance")
	}
	if _, ok := w.admit("service:alice"); !ok {
		t.Fatal("the service alice shares the user alice's bucket")
	}
	clock.advance(500 * time.Millisecond)
	if _, ok := w.admit("user:alice"); !ok {
		t.Fatal("no write allowed after 1/rate")
	}
	if _, ok := w.admit("user:alice"); ok {
		t.Fatal("two writes allowed after 1/rate")
	}
	clock.advance(time.Hour)
	for i := range 5 {
		if _, ok := w.admit("user:alice"); !ok {
			t.Fatalf("after an idle hour, write %d of a full burst refused", i+1)
		}
	}
	if _, ok := w.admit("user:alice"); ok {
		t.Fatal("an idle hour allowed more than the burst")
	}
}

func TestWriteLimiterMemoryIsBounded(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)}
	const capacity = 50
	w := newWriteLimiter(1, 3, capacity, clock.now, nil)
	// alice drains her bucket.
	for range 3 {
		w.admit("user:alice")
	}
	// A hostile stream of distinct principals, each writing once, never grows the map past its cap.
	for i := range 10 * capacity {
		w.admit(fmt.Sprintf("user:hostile-%d", i))
		if n := w.size(); n > capacity {
			t.Fatalf("after %d principals the limiter holds %d buckets, cap %d", i+1, n, capacity)
		}
		// alice keeps writing (and being refused): her bucket stays in use and is not forgotten.
		if i%(capacity/2) == 0 {
			if _, ok := w.admit("user:alice"); ok {
				t.Fatalf("alice's drained bucket was forgotten amid %d other principals", i+1)
			}
		}
	}
	// Buckets that refilled are the same as new ones: they are dropped as soon as anyone new writes.
	clock.advance(time.Hour)
	w.admit("user:newcomer")
	if n := w.size(); n != 1 {
		t.Errorf("after an idle hour the limiter holds %d buckets, want 1 (the newcomer's)", n)
	}
}

func TestRateKeyIsBounded(t *testing.T) {
	long := strings.Repeat("a", 64<<10)
	user, service := rateKey(Principal{Type: "user", Name: long}), rateKey(Principal{Type: "service", Name: long})
	if len(user) > maxRateKeyBytes || len(service) > maxRateKeyBytes || user == service {
		t.Errorf("keys of a 64 KiB name: %d and %d bytes, equal %v", len(user), len(service), user == service)
	}
	if other := rateKey(Principal{Type: "user", Name: long + "b"}); other == user {
		t.Error("two long names share a bucket")
	}
	if k := rateKey(Principal{Type: "user", Name: "alice@example.com"}); k != "user:alice@example.com" {
		t.Errorf("short name keyed %q", k)
	}
	// A short name spelled like the hashed key of a long one must not share its bucket.
	_, hash, _ := strings.Cut(user, "#")
	for _, spoof := range []string{"sha256:" + hash, "#" + hash, hash} {
		if rateKey(Principal{Type: "user", Name: spoof}) == user {
			t.Errorf("the name %q shares the bucket of a long name", spoof)
		}
	}
}

func TestWriteLimiterOffAdmitsEverything(t *testing.T) {
	if w := newWriteLimiter(0, 10, 10, time.Now, nil); w != nil {
		t.Fatal("-write-rate=0 made a limiter")
	}
	s := &Service{}
	for range 1000 {
		if err := s.AdmitWrite(context.Background()); err != nil {
			t.Fatalf("limit off: %v", err)
		}
	}
}

func TestRateLimitedErrorRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want int
	}{{time.Millisecond, 1}, {0, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {2500 * time.Millisecond, 3}} {
		if got := (&RateLimitedError{RetryAfter: tc.wait}).RetryAfterSeconds(); got != tc.want {
			t.Errorf("RetryAfter %v: %d s, want %d", tc.wait, got, tc.want)
		}
	}
}

func TestLimitErrorsMapToStatus(t *testing.T) {
	limits := DefaultLimits()
	err := limits.checkPairs(credpair.Strings(map[string]string{"k": strings.Repeat("v", limits.MaxCredentialValueBytes+1)}))
	st := status.Convert(toStatus(logtest.New(t), fmt.Errorf("wrapped: %w", err)))
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "-max-credential-value-bytes or GANTRY_MAX_CREDENTIAL_VALUE_BYTES") ||
		!strings.Contains(st.Message(), "262144") || strings.Contains(st.Message(), "vvvv") {
		t.Errorf("value too long: %v %q, want InvalidArgument naming the limit and the setting, without the value", st.Code(), st.Message())
	}

	st = status.Convert(toStatus(logtest.New(t), &RateLimitedError{RetryAfter: 1500 * time.Millisecond, Rate: 20, Burst: 200}))
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "-write-rate or GANTRY_WRITE_RATE") {
		t.Errorf("rate limited: %v %q", st.Code(), st.Message())
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if delay != 2*time.Second {
		t.Errorf("RetryInfo delay %v, want 2s", delay)
	}
}

func TestLimitChecks(t *testing.T) {
	l := Limits{MaxCredentialPairs: 2, MaxCredentialKeyBytes: 4, MaxCredentialValueBytes: 3, MaxCredentialMetadataBytes: 6, MaxServiceCredentials: 2}
	for _, tc := range []struct {
		name string
		err  error
		flag string // "" when allowed
	}{
		{"pairs at the limit", l.checkPairs(credpair.Strings(map[string]string{"a": "1", "b": "2"})), ""},
		{"too many pairs", l.checkPairs(credpair.Strings(map[string]string{"a": "1", "b": "2", "c": "3"})), flagMaxCredentialPairs},
		{"key at the limit", l.checkPairs(credpair.Strings(map[string]string{"abcd": "1"})), ""},
		{"key too long", l.checkPairs(credpair.Strings(map[string]string{"abcde": "1"})), flagMaxCredentialKeyBytes},
		{"value at the limit", l.checkPairs(credpair.Strings(map[string]string{"a": "123"})), ""},
		{"value too long in bytes, not runes", l.checkPairs(credpair.Strings(map[string]string{"a": "éé"})), flagMaxCredentialValueBytes},
		{"metadata at the limit", l.checkMetadata(map[string]string{"ab": "c", "d": "ef"}), ""},
		{"metadata too large", l.checkMetadata(map[string]string{"ab": "c", "d": "efg"}), flagMaxCredentialMetadataBytes},
		{"service at the limit", l.checkServiceCredentials([]string{"a"}, []string{"b"}), ""},
		{"service maps too many, blind ones included", l.checkServiceCredentials([]string{"a", "b"}, []string{"c"}), flagMaxServiceCredentials},
	} {
		var le *LimitError
		switch {
		case tc.flag == "" && tc.err != nil:
			t.Errorf("%s: refused: %v", tc.name, tc.err)
		case tc.flag != "" && (!errors.As(tc.err, &le) || le.Flag != tc.flag):
			t.Errorf("%s: %v, want a LimitError of -%s", tc.name, tc.err, tc.flag)
		}
	}
}

func TestLimitsConfig(t *testing.T) {
	cfg := DefaultConfig()
	table := settings.New(cfg.Settings())
	for _, name := range []string{flagMaxCredentialPairs, flagMaxCredentialKeyBytes, flagMaxCredentialValueBytes,
		flagMaxCredentialMetadataBytes, flagMaxServiceCredentials, flagWriteRate, flagWriteBurst} {
		if !table.Reads(settings.EnvName(settings.Prefix, name)) {
			t.Errorf("no flag -%s", name)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*Limits)
		want   string
	}{
		{func(l *Limits) { l.MaxCredentialPairs = 0 }, "GANTRY_MAX_CREDENTIAL_PAIRS"},
		{func(l *Limits) { l.MaxCredentialKeyBytes = -1 }, "GANTRY_MAX_CREDENTIAL_KEY_BYTES"},
		{func(l *Limits) { l.MaxCredentialValueBytes = 0 }, "GANTRY_MAX_CREDENTIAL_VALUE_BYTES"},
		{func(l *Limits) { l.MaxCredentialMetadataBytes = 0 }, "GANTRY_MAX_CREDENTIAL_METADATA_BYTES"},
		{func(l *Limits) { l.MaxServiceCredentials = 0 }, "GANTRY_MAX_SERVICE_CREDENTIALS"},
		{func(l *Limits) { l.WriteRate = -1 }, "GANTRY_WRITE_RATE"},
		{func(l *Limits) { l.WriteBurst = 0 }, "GANTRY_WRITE_BURST"},
	} {
		c := DefaultConfig()
		tc.mutate(&c.Limits)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bad %s: %v", tc.want, err)
		}
	}
	off := DefaultConfig()
	off.Limits.WriteRate, off.Limits.WriteBurst = 0, 0
	if err := off.Validate(); err != nil {
		t.Errorf("-write-rate=0 (off) with any burst: %v", err)
	}
}

// limitsService is a whole Service over a real store (see store_helpers_test.go) and keyring, under the
// default ACL, with limits.
func limitsService(t *testing.T, limits Limits, mutate func(*Config)) (*Service, store.Store) {
	t.Helper()
	dir := t.TempDir()
	logger := logtest.New(t)
	store := newTestStoreIn(t, dir, logger)
	ring, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), logger)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Limits = limits
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := NewService(context.Background(), cfg, Deps{Store: store, KMS: ring, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, store
}

// Writes over a limit are refused before anything is stored, and the refusal names the setting.
func TestWritesOverLimitsStoreNothing(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxCredentialPairs, limits.MaxCredentialValueBytes, limits.MaxCredentialMetadataBytes, limits.MaxServiceCredentials = 3, 16, 16, 2
	svc, st := limitsService(t, limits, nil)
	ctx := WithPrincipal(context.Background(), Principal{Name: "alice@example.com", Type: "user", AuthType: "kms"})
	name, doc := "db", "docs"
	create := func(pairs, metadata map[string]any) error {
		_, err := svc.CreateCredential(ctx, CredentialInput{Name: &name, Documentation: &doc, Pairs: pairs, Metadata: metadata})
		return err
	}
	wantLimit := func(what string, err error, flagName string) {
		t.Helper()
		var le *LimitError
		if !errors.As(err, &le) || le.Flag != flagName {
			t.Errorf("%s: %v, want a LimitError of -%s", what, err, flagName)
		}
	}
	wantLimit("4 pairs", create(map[string]any{"a": "1", "b": "2", "c": "3", "d": "4"}, nil), flagMaxCredentialPairs)
	wantLimit("long value", create(map[string]any{"a": strings.Repeat("x", 17)}, nil), flagMaxCredentialValueBytes)
	wantLimit("big metadata", create(map[string]any{"a": "1"}, map[string]any{"owner": strings.Repeat("x", 12)}), flagMaxCredentialMetadataBytes)
	if recs, _, err := st.ListCredentials(ctx, store.Page{}); err != nil || len(recs) != 0 {
		t.Fatalf("refused creates stored %d credentials (%v)", len(recs), err)
	}

	view, err := svc.CreateCredential(ctx, CredentialInput{Name: &name, Documentation: &doc, Pairs: map[string]any{"a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	id := view.Record.ID
	_, err = svc.UpdateCredential(ctx, id, CredentialInput{Pairs: map[string]any{"a": strings.Repeat("x", 17)}})
	wantLimit("update with a long value", err, flagMaxCredentialValueBytes)
	_, err = svc.UpdateCredential(ctx, id, CredentialInput{Metadata: map[string]any{"k": strings.Repeat("x", 16)}})
	wantLimit("update with big metadata", err, flagMaxCredentialMetadataBytes)
	if cur, err := st.GetCredential(ctx, id); err != nil || cur.Revision != 1 {
		t.Fatalf("refused updates wrote a revision: %v %v", cur, err)
	}
	// An update that does not send pairs leaves the stored ones alone: it is not judged by them.
	if _, err := svc.UpdateCredential(ctx, id, CredentialInput{Metadata: map[string]any{"k": "v"}}); err != nil {
		t.Fatalf("update within the limits: %v", err)
	}

	_, err = svc.PutService(ctx, "api", ServiceInput{Credentials: []string{id, "b"}, BlindCredentials: []string{"c"}})
	wantLimit("service with 3 credentials", err, flagMaxServiceCredentials)
	if _, err := st.GetService(ctx, "api"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused service stored: %v", err)
	}
	// Duplicates count once.
	if _, err := svc.PutService(ctx, "api", ServiceInput{Credentials: []string{id, id, id}}); err != nil {
		t.Fatalf("service mapping one credential three times: %v", err)
	}
}

// The interceptor counts the proto's authenticated writes against the caller's allowance before
// dispatch, and only those: reads pass however many there are.
func TestInterceptorRateLimitsWritesOnly(t *testing.T) {
	limits := DefaultLimits()
	limits.WriteRate, limits.WriteBurst = 0.001, 2
	// Every caller is the anonymous principal.
	svc, _ := limitsService(t, limits, func(c *Config) { c.Auth.UseAuth = false })
	s := &Server{svc: svc, logger: logtest.New(t)}
	intercept := s.authInterceptor(policies)
	// Any one method of each kind: the interceptor decides by the declared access alone.
	var writeMethod, readMethod string
	for method, p := range policies {
		switch p.Access {
		case optionsv1.Access_ACCESS_AUTHENTICATED_WRITE:
			writeMethod = method
		case optionsv1.Access_ACCESS_AUTHENTICATED:
			readMethod = method
		}
	}
	calls := 0
	handler := func(context.Context, any) (any, error) { calls++; return nil, nil }
	call := func(method string) (metadata.MD, error) {
		stream := &headerStream{method: method}
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), stream)
		_, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
		return stream.header, err
	}
	for range 50 {
		if _, err := call(readMethod); err != nil {
			t.Fatalf("read %s: %v", readMethod, err)
		}
	}
	for i := range 2 {
		if _, err := call(writeMethod); err != nil {
			t.Fatalf("write %d of the burst: %v", i+1, err)
		}
	}
	before := calls
	header, err := call(writeMethod)
	if status.Code(err) != codes.ResourceExhausted || calls != before {
		t.Fatalf("write past the burst: %v, handler called %v", err, calls != before)
	}
	if got := header.Get("retry-after"); len(got) != 1 || got[0] == "0" || got[0] == "" {
		t.Errorf("retry-after metadata %q, want whole seconds, at least 1", got)
	}
}

// headerStream records the header metadata a handler sets (grpc.SetHeader), as the transport would.
type headerStream struct {
	method string
	header metadata.MD
}

func (h *headerStream) Method() string { return h.method }
func (h *headerStream) SetHeader(md metadata.MD) error {
	h.header = metadata.Join(h.header, md)
	return nil
}
func (h *headerStream) SendHeader(md metadata.MD) error { return h.SetHeader(md) }
func (h *headerStream) SetTrailer(metadata.MD) error    { return nil }

// Named principals get their own allowance: a larger one, none at all (rate 0), or a limit while
// the default is off; everyone else keeps the default.
func TestWriteLimiterPrincipalAllowances(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}
	w := newWriteLimiter(1, 2, 100, clock.now, map[string]PrincipalWriteLimit{
		"service:deployer": {Rate: 100, Burst: 50},
		"user:ops":         {Rate: 0},
		"service:slow":     {Rate: 1}, // burst 0: the default burst (2)
	})
	admitted := func(key string, n int) int {
		ok := 0
		for range n {
			if _, yes := w.admit(key); yes {
				ok++
			}
		}
		return ok
	}
	for _, tc := range []struct {
		key  string
		want int
	}{{"user:alice", 2}, {"service:deployer", 50}, {"user:ops", 1000}, {"service:slow", 2}, {"user:deployer", 2}} {
		if got := admitted(tc.key, 1000); got != tc.want {
			t.Errorf("%s: %d of 1000 writes admitted at once, want %d", tc.key, got, tc.want)
		}
	}
	if a := w.allowance("service:deployer"); a.limit != 100 || a.burst != 50 {
		t.Errorf("deployer's allowance = %+v", a)
	}

	// The default off, one principal limited: only that one is.
	only := newWriteLimiter(0, 5, 100, clock.now, map[string]PrincipalWriteLimit{"user:loop": {Rate: 1, Burst: 3}})
	if only == nil {
		t.Fatal("a limit for one principal with the default off made no limiter")
	}
	for key, want := range map[string]int{"user:loop": 3, "user:alice": 100} {
		ok := 0
		for range 100 {
			if _, yes := only.admit(key); yes {
				ok++
			}
		}
		if ok != want {
			t.Errorf("default off: %s admitted %d of 100, want %d", key, ok, want)
		}
	}
	if w := newWriteLimiter(0, 5, 100, clock.now, map[string]PrincipalWriteLimit{"user:ops": {Rate: 0}}); w != nil {
		t.Error("no limit anywhere still made a limiter")
	}
}

func TestWritePrincipalsValidation(t *testing.T) {
	for _, tc := range []map[string]PrincipalWriteLimit{
		{"alice": {Rate: 1}}, {"robot:x": {Rate: 1}}, {"user:": {Rate: 1}},
		{"user:a": {Rate: -1}}, {"user:a": {Rate: 2e6}}, {"user:a": {Rate: 1, Burst: -1}},
	} {
		l := DefaultLimits()
		l.WritePrincipals = tc
		if err := l.validate(); err == nil || !strings.Contains(err.Error(), flagWritePrincipals) {
			t.Errorf("%v: %v, want an error naming -%s", tc, err, flagWritePrincipals)
		}
	}
	l := DefaultLimits()
	l.WritePrincipals = map[string]PrincipalWriteLimit{"service:deployer": {Rate: 200, Burst: 2000}, "user:ops@example.com": {}}
	if err := l.validate(); err != nil {
		t.Error(err)
	}
}
