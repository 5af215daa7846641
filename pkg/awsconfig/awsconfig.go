// Package awsconfig builds the AWS SDK configuration that every gantry AWS client (KMS, IAM, ACM
// Private CA) starts from: the SDK's default credential chain, an optional endpoint override, and an
// HTTP client with connect and read bounds.
package awsconfig

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Options says how to reach one AWS service.
type Options struct {
	// Region signs the requests; empty means the SDK's usual sources (AWS_REGION, profiles).
	Region string
	// Endpoint overrides the service endpoint (a VPC endpoint, a test server); empty means AWS's.
	Endpoint string
	// ConnectTimeout bounds dialling and the TLS handshake; ReadTimeout bounds the wait for the
	// response headers. Both must be positive.
	ConnectTimeout, ReadTimeout time.Duration
	// Timeout bounds one whole HTTP request; zero means ConnectTimeout + ReadTimeout.
	Timeout time.Duration
	// MaxConnsPerHost caps the connections to the endpoint; zero means no cap.
	MaxConnsPerHost int
}

// ValidateEndpoint accepts "" (AWS's own endpoint) or an absolute http(s) URL.
func ValidateEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid AWS endpoint %q: want an http or https URL", endpoint)
	}
	return nil
}

// Load returns the SDK configuration for o. It does not contact AWS, so a misconfiguration (no
// credentials, say) shows up on the first call. Clients apply o.Endpoint themselves with
// BaseEndpoint, as each service's Options has its own.
func Load(ctx context.Context, o Options) (aws.Config, error) {
	if err := ValidateEndpoint(o.Endpoint); err != nil {
		return aws.Config{}, err
	}
	if o.ConnectTimeout <= 0 || o.ReadTimeout <= 0 || o.Timeout < 0 {
		return aws.Config{}, errors.New("AWS timeouts must be positive")
	}
	total := cmp.Or(o.Timeout, o.ConnectTimeout+o.ReadTimeout)
	// The SDK's BuildableClient, not a plain http.Client: the SDK can only add a custom CA bundle
	// (AWS_CA_BUNDLE, common behind TLS-inspecting proxies) to a client it knows how to rebuild.
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = o.ConnectTimeout }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.TLSHandshakeTimeout = o.ConnectTimeout
			tr.ResponseHeaderTimeout = o.ReadTimeout
			if o.MaxConnsPerHost > 0 {
				tr.MaxConnsPerHost = o.MaxConnsPerHost
				tr.MaxIdleConnsPerHost = o.MaxConnsPerHost
			}
		}).
		// No WithReadTimeout: the SDK's per-read timer races with connection reuse under load ("set
		// tcp: use of closed network connection" on responses that already arrived). The response
		// header timeout and this overall limit bound a call just as well for these small answers,
		// including one that trickles in without ever stalling for a whole read timeout.
		WithTimeout(total)

	loadOpts := []func(*config.LoadOptions) error{config.WithHTTPClient(httpClient)}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return cfg, nil
}
