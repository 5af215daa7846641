// Package awstest holds what the tests of gantry's AWS clients share, whatever the service faked.
package awstest

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// ConnectionRetriesOnly is the retryer for SDK clients talking to an in-repo fake. It retries
// nothing but transport failures: a fault a fake injects as an HTTP error answer reaches the caller
// instead of being retried away, while the stdlib's occasional "use of closed network connection" on
// a reused loopback connection (aws-sdk-go-v2 #2737), which production's default retryer absorbs,
// cannot fail a test at random.
func ConnectionRetriesOnly() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 3
		o.Retryables = []retry.IsErrorRetryable{retry.RetryableConnectionError{}}
		o.Backoff = retry.NewExponentialJitterBackoff(time.Millisecond)
	})
}
