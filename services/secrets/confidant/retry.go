package confidant

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// KMSMaxAttempts is how many times the import tries one KMS call that AWS throttled or failed
// transiently (the SDK's default is 3).
const KMSMaxAttempts = 10

// KMSRetryer is the retryer of the import's KMS client. The import is a batch job that shares the
// account's KMS request quota with production: a ThrottlingException (the quota reached) or a 5xx is
// waited out with growing, jittered pauses (at most maxBackoff each; the SDK's 20 s in production)
// for up to KMSMaxAttempts tries, rather than failing the credential after the SDK's 3. The SDK's
// retry quota, which fails every call at once after about 100 retries in a burst, is off: a worker
// that waits is the backpressure the quota asks for, and each worker waits on its own.
func KMSRetryer(maxBackoff time.Duration) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = KMSMaxAttempts
		o.MaxBackoff = maxBackoff
		o.Backoff = retry.NewExponentialJitterBackoff(maxBackoff)
		o.RateLimiter = ratelimit.None
	})
}
